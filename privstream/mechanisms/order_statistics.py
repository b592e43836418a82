"""Exact top order statistics of many i.i.d. discrete Laplace variables, without sampling them all.

Used by the domain-wide top-k releases (Lebeda–Tětek §6, Chan et al.), which add noise to *every*
element of a known universe of size d and keep the k largest. For the N = d − |stored| elements
whose value is 0 only the few largest noise values can matter. We sample exactly those.

Method (Rényi's representation + an exact quantile transform):

1. Write each noise value as Z_i = Q(U_i), where U_i ~ Uniform[0, 1) are i.i.d. and Q is the
   quantile function of the discrete Laplace: Q(u) = min{z : u < F(z)}, F the CDF. This is exactly
   the discrete Laplace law.
2. The largest uniforms are W_1 > W_2 > … with W_1 = V_1^{1/N} and W_i = W_{i-1}·V_i^{1/(N-i+1)} for
   i.i.d. V_i ~ Uniform[0, 1). So the largest noise values are Q(W_1) ≥ Q(W_2) ≥ …, in the same
   order. Ties are broken by the uniforms, which is a uniformly random tie-break.
3. Each V_i is a *lazy* uniform: a growing string of random bits from the RandomSource, so V_i is
   known to lie in [u/2^b, (u+1)/2^b). Each test "Q(W_i) < z", i.e. ln W_i < ln F(z), is decided from
   a rigorous interval for ln W_i (sums of ln(V_j)/(N-j+1) over the bit intervals) against an
   interval for ln F(z). Both are computed with :mod:`decimal` at P significant digits. ``ln``,
   ``exp`` and the arithmetic are correctly rounded there. The margin 10^(8-P)·(1 + Σ|terms|) is far
   larger than the rounding accumulated over the few operations per term. If the intervals overlap,
   every V_j gets 64 more bits, P grows by 20 digits, and the test is repeated. The overlap
   probability shrinks like 2^-64 per round.

   The result is the exact order-statistics law. No floating-point rounding can bias it: a
   comparison is only answered once the intervals separate. It is not an approximation of that law.

The discrete Laplace has scale t (rational): Pr[Z = z] ∝ exp(-|z|/t), so with a = exp(-1/t):
ln F(z) = ln(1 − a^{z+1}/(1+a)) for z ≥ 0, and z/t − ln(1+a) for z < 0.
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

from privstream.noise.rng import RandomSource

_START_PREC = 40
_BITS = 64


class _LazyUniform:
    """V ~ Uniform[0,1) revealed in 64-bit chunks: V ∈ [u/2^b, (u+1)/2^b)."""

    __slots__ = ("u", "b")

    def __init__(self, rng: RandomSource) -> None:
        self.u = rng.randbits(_BITS)
        self.b = _BITS

    def refine(self, rng: RandomSource) -> None:
        self.u = (self.u << _BITS) | rng.randbits(_BITS)
        self.b += _BITS


class TopNoiseLevels:
    """Generates Q(W_1) ≥ Q(W_2) ≥ … for N i.i.d. discrete Laplace(t) values, one per ``next()``."""

    # Running interval sums over the earlier uniforms at the current precision (_reset_sums).
    _ln2: Decimal | None  # ln 2, computed on first use at this precision
    _sum_lo: Decimal | None  # None = −∞
    _sum_hi: Decimal
    _size: Decimal
    _summed: int

    def __init__(self, n: int, scale: Fraction, rng: RandomSource) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self._n = n
        self._t = scale
        self._rng = rng
        self._prec = _START_PREC
        self._uniforms: list[_LazyUniform] = []
        self._log_cdf_cache: dict[int, tuple[Decimal, Decimal]] = {}
        self._level: int | None = None  # level of the last generated W
        self._reset_sums()

    @property
    def generated(self) -> int:
        return len(self._uniforms)

    # ---- interval arithmetic -------------------------------------------------------------------
    def _margin(self, magnitude: Decimal) -> Decimal:
        return Decimal(10) ** (8 - self._prec) * (1 + abs(magnitude))

    def _log_cdf(self, z: int) -> tuple[Decimal, Decimal]:
        """Interval containing ln F(z)."""
        hit = self._log_cdf_cache.get(z)
        if hit is not None:
            return hit
        with localcontext() as ctx:
            ctx.prec = self._prec
            t = Decimal(self._t.numerator) / Decimal(self._t.denominator)
            log_one_plus_a = (1 + (-1 / t).exp()).ln()
            if z >= 0:
                value = (1 - (-(z + 1) / t).exp() / (1 + (-1 / t).exp())).ln()
            else:
                value = Decimal(z) / t - log_one_plus_a
            m = self._margin(value) + self._margin(Decimal(z) / t)
            out = (value - m, min(value + m, Decimal(0)))
        self._log_cdf_cache[z] = out
        return out

    def _terms(self, j: int, v: _LazyUniform, ln2: Decimal) -> tuple[Decimal | None, Decimal]:
        """ln(V_j)/(N−j) bounds from V_j's bit interval (None = −∞); call inside the context."""
        weight = Decimal(self._n - j)
        hi = ((Decimal(v.u + 1)).ln() - v.b * ln2) / weight
        lo = None if v.u == 0 else ((Decimal(v.u)).ln() - v.b * ln2) / weight
        return lo, hi

    def _log_w(self) -> tuple[Decimal | None, Decimal]:
        """Interval containing ln W_i for the latest i (None = −∞ lower end). The sums over the
        earlier uniforms are cached until the next refinement."""
        with localcontext() as ctx:
            ctx.prec = self._prec
            if self._ln2 is None:
                self._ln2 = Decimal(2).ln()
            ln2 = self._ln2
            while self._summed < len(self._uniforms) - 1:
                lo, hi = self._terms(self._summed, self._uniforms[self._summed], ln2)
                self._sum_lo = None if (lo is None or self._sum_lo is None) else self._sum_lo + lo
                self._sum_hi += hi
                self._size += abs(hi)
                self._summed += 1
            last = len(self._uniforms) - 1
            lo, hi = self._terms(last, self._uniforms[last], ln2)
            total_lo = None if (lo is None or self._sum_lo is None) else self._sum_lo + lo
            total_hi = self._sum_hi + hi
            m = self._margin(self._size + abs(hi)) * (len(self._uniforms) + 1)
            return (None if total_lo is None else total_lo - m), min(total_hi + m, Decimal(0))

    def _refine(self) -> None:
        for v in self._uniforms:
            v.refine(self._rng)
        self._prec += 20
        self._log_cdf_cache.clear()
        self._reset_sums()

    def _reset_sums(self) -> None:
        self._ln2 = None
        self._sum_lo = Decimal(0)
        self._sum_hi = Decimal(0)
        self._size = Decimal(0)
        self._summed = 0

    def _below(self, z: int) -> bool:
        """Decide ln W_i < ln F(z) (i.e. Q(W_i) <= z), refining until the intervals separate."""
        while True:
            w_lo, w_hi = self._log_w()
            f_lo, f_hi = self._log_cdf(z)
            if w_hi < f_lo:
                return True
            if w_lo is not None and w_lo >= f_hi:
                return False
            self._refine()

    # ---- generation ----------------------------------------------------------------------------
    def next(self) -> int:
        """The level Q(W_i) of the next largest uniform (levels are non-increasing)."""
        if len(self._uniforms) >= self._n:
            raise StopIteration("all N values generated")
        self._uniforms.append(_LazyUniform(self._rng))
        if self._level is None:  # gallop upward from 0 until Q(W_1) <= hi
            hi = 0
            step = 1
            while not self._below(hi):
                hi += step
                step *= 2
        else:
            hi = self._level
        # Smallest z <= hi with Q(W) <= z: gallop downward, then bisect.
        step = 1
        lo = hi - step
        while self._below(lo):
            hi = lo
            step *= 2
            lo = hi - step
        while hi - lo > 1:  # invariant: not below(lo), below(hi)
            mid = (lo + hi) // 2
            if self._below(mid):
                hi = mid
            else:
                lo = mid
        self._level = hi
        return hi
