"""Private Count-Min sketch, PCMS (Zhao et al. 2022; DPSW-Sketch Alg. 1), with exact noise.

A PCMS is a Count-Min table of ``a`` rows and ``b`` counters whose counters each get one noise
draw **at creation** (Alg. 1 ``init``), never re-drawn; ``add`` increments one counter per row and
``query`` returns the minimum over the rows. Replacing one ingested item changes at most ``2a``
counters by ±1, so the ℓ2 sensitivity is ``√(2a)`` and Gaussian noise of variance ``a/ρ`` makes
the table ρ-zCDP (DPSW §3, Gaussian mechanism; Lemma 4.1 composes the PCMSs).

**Noise.** The paper draws continuous ``N(0, a/ρ)``. privstream draws the *discrete* Gaussian
``N_Z(0, a/ρ)`` with the exact integer sampler of :mod:`privstream.noise` (Canonne–Kamath–Steinke
2020, Alg. 3), driven by the CSPRNG (:func:`privstream.noise.rng.resolve`). The discrete Gaussian
with σ² = Δ2²/(2ρ) on integer-valued queries is ρ-zCDP (CKS Thm 4), the same ρ as the continuous one,
with no floating-point sampling leak; see docs/sliding-window.md.

The noise is drawn through a :data:`NoiseSampler` ``(σ², count) -> int64 array``; the production one
is :func:`discrete_gaussian_noise`. Tests may inject a zero sampler to check exact answers; production
code never does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from privstream.accounting.budget import exact_value
from privstream.noise.discrete import discrete_gaussian_array
from privstream.noise.rng import RandomSource, resolve
from privstream.sketches.hashing import MAX_WIDTH, bucket_indices, item_hashes, min_over_rows, row_salts
from privstream.validation import check_int

#: ``(variance σ², count) -> count i.i.d. int64 noise values``.
NoiseSampler = Callable[[Fraction, int], np.ndarray]


def discrete_gaussian_noise(rng: RandomSource | None = None) -> NoiseSampler:
    """The production sampler: exact discrete Gaussian N_Z(0, σ²) draws from ``rng`` (the CSPRNG
    if None; tests inject a seeded source)."""
    source = resolve(rng)
    return lambda sigma2, count: discrete_gaussian_array(sigma2, count, source)


def pcms_variance(depth: int, rho: Fraction) -> Fraction:
    """σ² = a/ρ: Δ2² = 2a for a replaced item, σ² = Δ2²/(2ρ) (DPSW Alg. 1, Gaussian mechanism)."""
    if rho <= 0:
        raise ValueError(f"rho: must be > 0, got {rho}")
    return Fraction(depth) / rho


class HashFamily:
    """The ``a`` row hashes ``h_r: E → [b]`` shared by every PCMS of one DPSW-Sketch (the paper
    leaves sharing open; either choice is consistent with its analysis)."""

    def __init__(self, depth: int, width: int, seed: int) -> None:
        self.depth = check_int("depth", depth, allow_numpy=True, type_error=ValueError)
        self.width = check_int("width", width, below=MAX_WIDTH + 1, allow_numpy=True, type_error=ValueError)
        self.seed = check_int("seed", seed, minimum=0, below=2**64, allow_numpy=True, type_error=ValueError)
        self._salts = row_salts(self.seed, self.depth)

    def buckets(self, items: object) -> np.ndarray:
        """(depth, len(items)) bucket indices."""
        return bucket_indices(item_hashes(items, self.seed), self._salts, self.width)


def noisy_table(depth: int, width: int, rho: Fraction, noise: NoiseSampler) -> np.ndarray:
    """Alg. 1 ``init``: a (depth, width) int64 table of i.i.d. noise of variance a/ρ."""
    values = noise(pcms_variance(depth, rho), depth * width)
    return np.asarray(values, dtype=np.int64).reshape(depth, width)


#: Alg. 1 lines 3–5 for a batch: ``min_r C[r, h_r(e)]`` per column of ``buckets`` (Count-Min's query).
table_query = min_over_rows


class PCMS:
    """One private Count-Min sketch (DPSW Alg. 1) over its whole ingested range: ρ-zCDP for that
    range once complete (queries are post-processing). Stand-alone form; DPSW-Sketch keeps its
    PCMSs as arrays (:mod:`privstream.window.dpsw`) with the same hashing, noise and query."""

    def __init__(
        self,
        depth: int,
        width: int,
        rho: Fraction | float,
        seed: int = 0,
        *,
        rng: RandomSource | None = None,
        noise: NoiseSampler | None = None,
    ) -> None:
        self._hashes = HashFamily(depth, width, seed)
        self.rho = Fraction(rho) if isinstance(rho, Fraction) else _positive_rho(rho)
        sampler = noise if noise is not None else discrete_gaussian_noise(rng)
        self._table = noisy_table(self._hashes.depth, self._hashes.width, self.rho, sampler)
        self.n = 0

    @property
    def variance(self) -> Fraction:
        """The noise variance a/ρ of every counter."""
        return pcms_variance(self._hashes.depth, self.rho)

    @property
    def table(self) -> np.ndarray:
        view = self._table.view()
        view.flags.writeable = False
        return view

    def add(self, item: object) -> None:
        """Alg. 1 lines 1–2: ``C[r, h_r(x)] += 1`` for every row."""
        self.add_batch([item])

    def add_batch(self, items: Sequence[object] | np.ndarray) -> None:
        buckets = self._hashes.buckets(items)
        for row, idx in zip(self._table, buckets, strict=True):
            row += np.bincount(idx, minlength=self._hashes.width)
        self.n += buckets.shape[1]

    def query(self, item: object) -> int:
        return int(self.query_batch([item])[0])

    def query_batch(self, items: Sequence[object] | np.ndarray) -> np.ndarray:
        return table_query(self._table, self._hashes.buckets(items))


def _positive_rho(value: float) -> Fraction:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not value > 0
        or value == float("inf")
    ):
        raise ValueError(f"rho: must be a finite number > 0, got {value!r}")
    return exact_value(value)
