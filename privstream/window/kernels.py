"""Compiled (numba) update kernel of DPSW-Sketch (Alg. 2 lines 10–11) for a batch of items.

Item i, at offset ``o_i`` inside its substream, is added to every PCMS k of that substream whose
range ``[starts[k], ends[k]]`` contains ``o_i`` (at most 2|I| − 1 of them), one counter per row.
Counters are sums over items, so the result is exactly item-by-item maintenance whatever the batch
boundaries (the same argument as :mod:`privstream.sketches.count_min`), and the kernel visits the
items in order anyway.
"""

from __future__ import annotations

import numpy as np

from privstream.sketches.kernels import njit


@njit(cache=True)
def add_items(
    tables: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    offsets: np.ndarray,
    buckets: np.ndarray,
    lo: int,
    hi: int,
) -> int:
    """Add items ``lo..hi-1`` (offsets ``offsets[i - lo]``, buckets ``buckets[:, i]``) to the
    (K, a, b) ``tables``; returns the number of PCMS insertions made."""
    n_sketches, depth = tables.shape[0], tables.shape[1]
    inserted = 0
    for i in range(lo, hi):
        o = offsets[i - lo]
        for k in range(n_sketches):
            if starts[k] <= o <= ends[k]:
                inserted += 1
                for r in range(depth):
                    tables[k, r, buckets[r, i]] += 1
    return inserted
