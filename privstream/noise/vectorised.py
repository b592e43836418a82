"""Vectorised exact discrete Laplace and discrete Gaussian samplers (Canonne–Kamath–Steinke 2020,
Algorithms 1–3), run over numpy arrays of lanes.

Every lane follows CKS exactly; only the bookkeeping is vectorised:

* Alg. 2 (discrete Laplace, scale t/s): U uniform in [0, t); D ← Bernoulli(exp(-U/t)), rejecting
  the lane if D = 0; V ← number of Bernoulli(exp(-1)) successes before the first failure;
  Y ← ⌊(U + t·V)/s⌋; B ← one uniform bit; reject (B = 1, Y = 0); return (1 - 2B)·Y.
* Alg. 3 (discrete Gaussian, σ² = N/D): t = ⌊σ⌋ + 1; Y ← Alg. 2 with scale t; accept Y with
  Bernoulli(exp(-γ)), γ = (|Y| - σ²/t)²/(2σ²) = (|Y|·t·D - N)²/(2·N·D·t²).
* Alg. 1 (Bernoulli(exp(-γ)), γ = p/q): ⌊γ⌋ Bernoulli(exp(-1)) trials, then for f = γ - ⌊γ⌋ the
  K-loop "K ← 1; while Bernoulli(f/K): K ← K + 1; return [K odd]".

All decisions are integer comparisons on uniform random words taken from the given
:class:`~privstream.noise.rng.RandomSource` in bulk (``randbits`` of many words at once):

* a uniform integer below a bound b ≤ 2**32 comes from an L-bit word x (L ∈ {8, 16, 32}, the
  narrowest with b ≤ 2**(L-6)) by exact rejection: with q = ⌊2**L/b⌋, words x ≥ q·b are redrawn
  and the value is ⌊x/q⌋ (never ``x mod b``). Bernoulli(a/b) is "uniform below b < a" (CKS Alg. 1),
  i.e. [x < a·q] on an accepted word. Bounds above :attr:`Limits.word_bound` are drawn lane by
  lane with ``rng.randbelow``. The default ``word_bound`` is 2**32; a caller that raises it (up to
  :data:`MAX_WORD_BOUND` = 2**63, e.g. the LDP randomisers' GRR bounds a + 2**40·(d−1)) gets bounds
  above 2**32 from 64-bit words by the same rejection (fewer than half redrawn);
* Bernoulli(f/K) for the large-rational fraction f of the Gaussian's γ compares the first
  ``compare_bits`` bits x of a uniform U ∈ [0, 1) with G = ⌊f·2**bits/K⌋: x < G means U < f/K,
  x > G means U > f/K, and a tie (probability 2**-bits) is finished exactly by drawing the rest of U,
  i.e. Bernoulli(f·2**bits/K - G) with ``rng.randbelow`` on Python integers.

The pairs (⌊γ⌋, ⌊frac(γ)·2**bits⌋) of every |Y| < :attr:`Limits.table_size` (bounded by 64·t + 64)
are computed exactly with Python integers once per (σ², bits) and cached, so σ² may have numerators
and denominators of any size (DPSW passes ~70-bit ones). Lanes whose |Y| lies beyond the table, or
whose ⌊γ⌋ exceeds :attr:`Limits.whole_trials`, finish their acceptance test with the scalar exact
kernel (:func:`privstream.noise.bernoulli._bernoulli_exp`). The callers in
:mod:`privstream.noise.discrete` use the scalar samplers for the whole array when the scale t exceeds
:attr:`Limits.max_t`. So every output is exact for every input.

Candidates are i.i.d. and each is accepted or rejected on its own randomness, so the accepted ones,
taken in index order, are i.i.d. from the target; how many candidates are drawn per round depends
only on n and on integer counts of earlier rounds (never on floating point), so a seeded or keyed
source always gives the same array.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from math import isqrt
from typing import Any

import numpy as np

from privstream.noise.bernoulli import _bernoulli_exp
from privstream.noise.rng import RandomSource

logger = logging.getLogger(__name__)

_WORD_WIDTHS = (8, 16, 32, 64)
_DTYPES: dict[int, np.dtype[Any]] = {
    8: np.dtype("<u1"),
    16: np.dtype("<u2"),
    32: np.dtype("<u4"),
    64: np.dtype("<u8"),
}
#: the largest ``Limits.word_bound``: bounds above 2**32 come from 64-bit words (int64 results)
MAX_WORD_BOUND = 2**63
_MIN_REFILL_BYTES = 4096
_INT64_SAFE = 2**62


@dataclass(frozen=True)
class Limits:
    """Where the vectorised path hands over to exact scalar code (tests lower them to force it).

    ``max_t``: largest Laplace scale numerator t handled vectorised (larger: scalar samplers for the
    whole array); ``word_bound``: largest uniform bound drawn from bulk words (default 2**32, at
    most :data:`MAX_WORD_BOUND`; larger bounds: ``rng.randbelow`` per lane); ``compare_bits``: bits of U compared before a tie is
    finished exactly; ``whole_trials``: most Bernoulli(exp(-1)) trials of Alg. 1 run vectorised per
    lane (the rest of a larger ⌊γ⌋ runs in the scalar kernel); ``table_size``: most cached |Y|
    values per σ² (larger |Y|: scalar acceptance test).
    """

    max_t: int = 2**24
    word_bound: int = 2**32
    compare_bits: int = 16
    whole_trials: int = 16
    table_size: int = 2**20

    def __post_init__(self) -> None:
        if not 1 <= self.word_bound <= MAX_WORD_BOUND:
            raise ValueError(f"word_bound must lie in [1, 2**63], got {self.word_bound}")
        if not 1 <= self.compare_bits <= 32:
            raise ValueError(f"compare_bits must lie in [1, 32], got {self.compare_bits}")
        if self.max_t > 2**31 or self.whole_trials < 0 or self.table_size < 1:
            raise ValueError("max_t must be <= 2**31, whole_trials >= 0 and table_size >= 1")


DEFAULT_LIMITS = Limits()


def fast_path(t: int, s: int, limits: Limits = DEFAULT_LIMITS) -> bool:
    """Whether scale t/s (integers) is sampled vectorised: all int64 products then fit."""
    return 1 <= t <= limits.max_t and 1 <= s <= _INT64_SAFE


class _Draws:
    """Per-call state: bulk uniform words of each width from ``rng``, the limits, and counts of the
    exact scalar hand-overs taken (``stats``, for tests and diagnostics)."""

    def __init__(self, rng: RandomSource, limits: Limits, stats: Counter[str] | None) -> None:
        self.rng = rng
        self.limits = limits
        self.stats: Counter[str] = Counter() if stats is None else stats
        self._buf = {w: np.empty(0, dtype=_DTYPES[w]) for w in _WORD_WIDTHS}
        self._pos = dict.fromkeys(_WORD_WIDTHS, 0)
        self._drawn = dict.fromkeys(_WORD_WIDTHS, 0)

    def words(self, count: int, width: int) -> np.ndarray:
        """``count`` uniform ``width``-bit words (a read-only view; widths 8, 16, 32, 64)."""
        buf, pos = self._buf[width], self._pos[width]
        if buf.size - pos < count:
            per = width // 8
            # refill: at least what is asked, 4 KiB, and a quarter of all drawn so far (amortised)
            fresh = max(count - (buf.size - pos), _MIN_REFILL_BYTES // per, self._drawn[width] // 4)
            raw = self.rng.randbits(width * fresh).to_bytes(per * fresh, "little")
            self._drawn[width] += fresh
            buf = np.concatenate([buf[pos:], np.frombuffer(raw, dtype=_DTYPES[width])])
            self._buf[width], pos = buf, 0
        self._pos[width] = pos + count
        return buf[pos : pos + count]

    def _valid_words(self, bound: int, count: int) -> tuple[np.ndarray, int]:
        """``count`` words x uniform on [0, q·bound) with q = 2**L // bound (rejection sampling:
        the words at or above q·bound are redrawn), and q. Then x // q is uniform below bound and
        [x < a·q] is Bernoulli(a/bound) exactly. L ∈ {8, 16, 32} is the narrowest width with
        bound <= 2**(L-6), so fewer than 1/64 of the words are redrawn; bounds in (2**26, 2**32]
        use 32-bit words and bounds above 2**32 (up to :data:`MAX_WORD_BOUND`) 64-bit words, with
        fewer than half redrawn."""
        width = next((w for w in _WORD_WIDTHS[:3] if bound <= 1 << (w - 6)), 32 if bound <= 1 << 32 else 64)
        q = (1 << width) // bound
        limit = q * bound
        x = self.words(count, width)
        if limit == 1 << width:
            return x, q
        bad = np.flatnonzero(x >= limit)
        if bad.size:
            x = x.copy()
            while bad.size:
                x[bad] = self.words(bad.size, width)
                bad = bad[x[bad] >= limit]
        return x, q

    def below(self, bound: int, count: int) -> np.ndarray:
        """``count`` i.i.d. uniform integers in [0, bound) (int64), exactly."""
        if bound > self.limits.word_bound:
            self.stats["randbelow_lanes"] += count
            return np.array([self.rng.randbelow(bound) for _ in range(count)], dtype=np.int64)
        if bound == 1:  # the only value: no randomness needed
            return np.zeros(count, dtype=np.int64)
        x, q = self._valid_words(bound, count)
        return (x // x.dtype.type(q)).astype(np.int64)

    def bernoulli(self, num: np.ndarray | int, den: int, count: int) -> np.ndarray:
        """``count`` Bernoulli(num/den) as "uniform below den < num" (CKS Alg. 1's test), exactly;
        ``num`` is a scalar or one integer in [0, den] per lane."""
        if den > min(self.limits.word_bound, 1 << 32):  # int64 compare (no uint64·int64 mixing)
            return self.below(den, count) < num
        x, q = self._valid_words(den, count)
        return x < np.asarray(num, dtype=np.int64) * q

    def bits(self, count: int) -> np.ndarray:
        """``count`` uniform bits as a bool array."""
        return np.unpackbits(self.words(-(-count // 8), 8))[:count].astype(bool)

    def top_bits(self, count: int, nbits: int) -> np.ndarray:
        """``count`` uniform ``nbits``-bit integers (int64): the top bits of the narrowest word."""
        width = next(w for w in _WORD_WIDTHS if nbits <= w)
        words = self.words(count, width).astype(np.int64)
        return words >> (width - nbits) if nbits < width else words

    def bernoulli_exp_ratio(self, num: np.ndarray, den: int) -> np.ndarray:
        """Bernoulli(exp(-num_i/den)) per lane, 0 <= num_i <= den (CKS Alg. 1, γ ≤ 1 branch):
        at step K every still-running lane draws Bernoulli(num/(den·K)) as "uniform below den·K
        < num", so all lanes of a step share one bound."""
        out = np.ones(num.size, dtype=bool)  # num = 0: the first trial fails, K = 1, odd
        active = np.flatnonzero(num > 0)
        k = 1
        while active.size:
            cont = self.bernoulli(num[active], den * k, active.size)
            out[active[~cont]] = k & 1 == 1
            active = active[cont]
            k += 1
        return out

    def bernoulli_exp_minus_one(self, count: int) -> np.ndarray:
        """``count`` i.i.d. Bernoulli(exp(-1)) (CKS Alg. 1 with γ = 1: the first trial,
        Bernoulli(1), always succeeds, so K starts at 2 and step K draws Bernoulli(1/K))."""
        out = np.empty(count, dtype=bool)
        active = np.arange(count)
        k = 2
        while active.size:
            cont = self.bernoulli(1, k, active.size)
            out[active[~cont]] = k & 1 == 1
            active = active[cont]
            k += 1
        return out

    def geometric(self, count: int) -> np.ndarray:
        """``count`` i.i.d. V = number of Bernoulli(exp(-1)) successes before the first failure.

        One flat i.i.d. sequence of trials is cut after each failure; the successes at the end of
        a batch carry into the next batch's first run, so the runs are exactly i.i.d."""
        out = np.empty(count, dtype=np.int64)
        filled = carry = 0
        while filled < count:
            need = count - filled
            size = need + (need * 5) // 8 + 32  # E[trials per V] = 1/(1 - e^-1) ≈ 1.58
            fails = np.flatnonzero(~self.bernoulli_exp_minus_one(size))
            if fails.size == 0:
                carry += size
                continue
            runs = np.diff(fails, prepend=-1) - 1
            runs[0] += carry
            take = min(need, runs.size)
            out[filled : filled + take] = runs[:take]
            filled += take
            carry = size - 1 - int(fails[-1])
        return out


def _laplace_candidates(draws: _Draws, t: int, s: int, count: int) -> np.ndarray:
    """The accepted samples of ``count`` attempts of CKS Alg. 2 with scale t/s (i.i.d. exact)."""
    u = draws.below(t, count)
    u = u[draws.bernoulli_exp_ratio(u, t)]  # D ← Bernoulli(exp(-U/t)); reject if D = 0
    v = draws.geometric(u.size)
    if v.size and int(v.max()) > (_INT64_SAFE - t) // t:  # pragma: no cover - probability e^-(2^38)
        raise OverflowError("a discrete Laplace sample does not fit in int64")
    y = (u + t * v) // s
    negative = draws.bits(y.size)
    keep = ~(negative & (y == 0))  # reject (B = 1, Y = 0) so that 0 is not counted twice
    return np.where(negative, -y, y)[keep]


class _GammaTable:
    """Exact (⌊γ⌋ capped at whole_trials + 1, ⌊frac(γ)·2**bits⌋) for |Y| < size, filled lazily,
    with γ(a) = (a·t·D - N)²/(2·N·D·t²) the CKS Alg. 3 exponent for σ² = N/D."""

    def __init__(self, num: int, den: int, bits: int, whole_trials: int, size: int) -> None:
        self.num, self.t = num, _scale_t(num, den)
        self.t_den = self.t * den
        self.two_num_den_t2 = 2 * num * den * self.t * self.t
        self.bits, self.whole_cap = bits, whole_trials + 1
        self.size = min(size, 64 * self.t + 64)
        self.whole = np.zeros(self.size, dtype=np.int64)
        self.frac_bits = np.zeros(self.size, dtype=np.int64)
        self.filled = np.zeros(self.size, dtype=bool)

    def gamma(self, a: int) -> tuple[int, int]:
        """(⌊γ⌋, remainder) with γ = ⌊γ⌋ + remainder/two_num_den_t2, exactly."""
        diff = a * self.t_den - self.num
        return divmod(diff * diff, self.two_num_den_t2)

    def lookup(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        missing = np.unique(a[~self.filled[a]])
        for value in missing.tolist():
            whole, rem = self.gamma(value)
            self.whole[value] = min(whole, self.whole_cap)
            self.frac_bits[value] = (rem << self.bits) // self.two_num_den_t2
            self.filled[value] = True
        return self.whole[a], self.frac_bits[a]


@lru_cache(maxsize=16)
def _gamma_table(num: int, den: int, bits: int, whole_trials: int, size: int) -> _GammaTable:
    return _GammaTable(num, den, bits, whole_trials, size)


def _scale_t(num: int, den: int) -> int:
    """t = ⌊σ⌋ + 1 for σ² = num/den (⌊√(num/den)⌋ = isqrt(⌊num/den⌋))."""
    return isqrt(num // den) + 1


def _accept(draws: _Draws, table: _GammaTable, y: np.ndarray) -> np.ndarray:
    """C ← Bernoulli(exp(-γ(|Y|))) per lane (CKS Alg. 3's test, by Alg. 1)."""
    rng, limits = draws.rng, draws.limits
    a = np.abs(y)
    out = np.zeros(y.size, dtype=bool)
    beyond = np.flatnonzero(a >= table.size)
    if beyond.size:  # rare huge |Y|: the whole test in the scalar kernel
        draws.stats["scalar_accept_lanes"] += beyond.size
        for i in beyond.tolist():
            g_whole, g_rem = table.gamma(int(a[i]))
            out[i] = _bernoulli_exp(g_whole * table.two_num_den_t2 + g_rem, table.two_num_den_t2, rng)
    lanes = np.flatnonzero(a < table.size)
    whole, frac_bits = table.lookup(a[lanes])
    # ⌊γ⌋ Bernoulli(exp(-1)) trials (at most whole_trials here), as consecutive segments of one
    # flat i.i.d. pool: a lane passes iff its segment holds no failure
    trials = np.minimum(whole, limits.whole_trials)
    ends = np.cumsum(trials)
    failures = np.concatenate(
        ([0], np.cumsum(~draws.bernoulli_exp_minus_one(int(ends[-1]) if ends.size else 0)))
    )
    passed = failures[ends] == failures[ends - trials]
    over = passed & (whole > limits.whole_trials)
    if over.any():  # ⌊γ⌋ > whole_trials: the remaining trials and the fraction in the scalar kernel
        draws.stats["scalar_accept_lanes"] += int(over.sum())
        done = limits.whole_trials * table.two_num_den_t2
        for i in np.flatnonzero(over).tolist():
            g_whole, rem = table.gamma(int(a[lanes[i]]))
            out[lanes[i]] = _bernoulli_exp(
                g_whole * table.two_num_den_t2 + rem - done, table.two_num_den_t2, rng
            )
    unit = np.flatnonzero(passed & ~over)
    out[lanes[unit]] = _bernoulli_exp_frac(draws, table, a[lanes[unit]], frac_bits[unit])
    return out


def _bernoulli_exp_frac(
    draws: _Draws, table: _GammaTable, a: np.ndarray, frac_bits: np.ndarray
) -> np.ndarray:
    """Bernoulli(exp(-f)) for f = frac(γ(a)) (CKS Alg. 1, γ ≤ 1 branch), Bernoulli(f/K) by
    comparing the first bits of a uniform U with ⌊f·2**bits/K⌋ and finishing ties exactly."""
    bits, den2 = table.bits, table.two_num_den_t2
    out = np.ones(a.size, dtype=bool)
    active = np.arange(a.size)
    k = 1
    while active.size:
        x = draws.top_bits(active.size, bits)
        threshold = frac_bits[active] // k  # ⌊⌊f·2^bits⌋/K⌋ = ⌊f·2^bits/K⌋
        cont = x < threshold
        for j in np.flatnonzero(x == threshold).tolist():  # tie: U < f/K iff rest of U < r
            draws.stats["compare_ties"] += 1
            rem = table.gamma(int(a[active[j]]))[1]
            r_num = (rem << bits) - int(threshold[j]) * k * den2  # r = r_num/(k·den2) ∈ [0, 1)
            cont[j] = r_num > 0 and draws.rng.randbelow(k * den2) < r_num
        out[active[~cont]] = k & 1 == 1
        active = active[cont]
        k += 1
    return out


def _rounds(need: int, attempts: int, accepted: int) -> int:
    """Attempts for the next round: 5/2 per wanted sample at first, then the observed integer
    yield of this call with 1/8 to spare."""
    if accepted == 0:
        return need * 5 // 2 + 16
    return (need * attempts * 9) // (accepted * 8) + 16


def _collect(n: int, attempt: Callable[[int], np.ndarray]) -> np.ndarray:
    """The first ``n`` accepted samples of repeated rounds ``attempt(size)`` (each returns the
    round's accepted samples in order); round sizes come from :func:`_rounds`, so they depend only
    on n and on earlier rounds' counts."""
    parts: list[np.ndarray] = []
    got = attempts = 0
    while got < n:
        size = _rounds(n - got, attempts, got)
        y = attempt(size)[: n - got]
        attempts += size
        parts.append(y)
        got += y.size
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def laplace_array(
    t: int,
    s: int,
    n: int,
    rng: RandomSource,
    limits: Limits = DEFAULT_LIMITS,
    stats: Counter[str] | None = None,
) -> np.ndarray:
    """``n`` i.i.d. exact discrete Laplace samples of scale t/s (CKS Alg. 2), vectorised; requires
    :func:`fast_path` (t, s)."""
    if not fast_path(t, s, limits):
        raise ValueError(f"scale {t}/{s} is outside the vectorised path; use the scalar sampler")
    draws = _Draws(rng, limits, stats)
    return _collect(n, lambda size: _laplace_candidates(draws, t, s, size))


def gaussian_array(
    num: int,
    den: int,
    n: int,
    rng: RandomSource,
    limits: Limits = DEFAULT_LIMITS,
    stats: Counter[str] | None = None,
) -> np.ndarray:
    """``n`` i.i.d. exact discrete Gaussian samples with σ² = num/den (CKS Alg. 3), vectorised;
    requires :func:`fast_path` (⌊σ⌋ + 1, 1)."""
    t = _scale_t(num, den)
    if not fast_path(t, 1, limits):
        raise ValueError(f"sigma2 {num}/{den} is outside the vectorised path; use the scalar sampler")
    table = _gamma_table(num, den, limits.compare_bits, limits.whole_trials, limits.table_size)
    draws = _Draws(rng, limits, stats)

    def accepted(size: int) -> np.ndarray:
        y = _laplace_candidates(draws, t, 1, size)
        return y[_accept(draws, table, y)]

    out = _collect(n, accepted)
    if draws.stats:
        logger.debug(
            "discrete Gaussian sigma2=%d/%d: exact scalar hand-overs %s", num, den, dict(draws.stats)
        )
    return out


#: limits with bulk words for every bound up to :data:`MAX_WORD_BOUND` (the LDP randomisers' GRR
#: bounds a + 2**40·(d−1) exceed 2**32 for every d ≥ 2)
WIDE_LIMITS = Limits(word_bound=MAX_WORD_BOUND)


def uniform_below(bound: int, count: int, rng: RandomSource, limits: Limits = WIDE_LIMITS) -> np.ndarray:
    """``count`` i.i.d. uniform integers in [0, ``bound``) (int64) from ``rng``, exactly (rejection
    sampling on bulk words, :meth:`_Draws.below`); ``bound`` at most :data:`MAX_WORD_BOUND`, so
    every value fits int64 (callers with larger bounds draw lane by lane with ``rng.randbelow``)."""
    if not 1 <= bound <= MAX_WORD_BOUND:
        raise ValueError(f"bound: must lie in [1, 2**63], got {bound}")
    return _Draws(rng, limits, None).below(bound, count)
