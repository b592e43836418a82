"""The mergeable-summaries merge of Misra–Gries sketches (Agarwal, Cormode, Huang, Phillips, Wei,
Yi 2013), shared by MG, standard MG, batch updates and PAMG.

``Merge(c1, c2)``: sum the counters per key, subtract the value of the (k+1)-th largest sum (0 when
there are at most k keys), drop non-positive counters; at most k keys remain. Lebeda–Tětek
Lemma 7.1 / Cor. 7.2: for any *fixed* merge order, neighbouring inputs give merged counters that
differ by 1 on at most k keys, all with the same sign — *provided every other merged input is
unchanged*. That is why no batch update of one stream goes through this merge: cutting one stream
into count-cut batches and merging each batch's exact histogram would move every later batch
boundary when one event is removed (neighbouring sketches then differ by far more than 1); batch
updates run Alg. 1 / Alg. 4 item by item instead (:mod:`privstream.sketches.kernels`). Merging is
for sketches of sub-streams cut by a rule that depends on each event alone (a hash of its item or
user, its own timestamp against public punctuations).
"""

from __future__ import annotations

import numpy as np

from privstream.sketches.histogram import Counts


def kth_largest(counts: np.ndarray, rank: int) -> int:
    """Value of the ``rank``-th largest entry (1-based) of ``counts``; 0 if there are fewer entries."""
    if len(counts) < rank:
        return 0
    pivot = len(counts) - rank
    return int(np.partition(counts, pivot)[pivot])


def mg_merge(a: Counts, b: Counts, k: int) -> Counts:
    """Agarwal et al. merge of two summaries into at most ``k`` counters."""
    summed = a.plus(b)
    offset = kth_largest(summed.all_counts(), k + 1)
    return summed.shifted_down(offset) if offset > 0 else summed
