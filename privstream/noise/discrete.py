"""Exact discrete Laplace and discrete Gaussian samplers (Canonne–Kamath–Steinke 2020,
Algorithms 2 and 3), with array helpers returning ``numpy.int64`` arrays.

* Discrete Laplace (two-sided geometric) with rational scale t:  Pr[Z = z] ∝ exp(-|z|/t).
  With α = exp(-1/t) this is Pr[Z = z] = (1-α)/(1+α)·α^|z|, i.e. Ghosh–Roughgarden–Sundararajan's
  geometric mechanism and Chan et al.'s Geom(exp(1/t)) (Def. 7).
* Discrete Gaussian with rational variance parameter σ²:  Pr[Y = y] ∝ exp(-y²/(2σ²)).

Both run on integers only (the scale t = n/d is handled as the integer pair (n, d)), and draw all
randomness from a :class:`~privstream.noise.rng.RandomSource` (the CSPRNG unless a test injects a
seeded source). Expected cost is O(1) random draws per sample, independent of the scale. The array
helpers run the same algorithms vectorised (:mod:`privstream.noise.vectorised`, ≈ 0.35 µs per draw
at DPSW's σ²) and fall back to the exact scalar kernels here when the Laplace scale's integers t, s
or the Gaussian's t = ⌊σ⌋ + 1 exceed the fast path's limits (t > 2^24, e.g. most float Laplace
scales, whose exact binary value has a large numerator) — slower, equally exact.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from fractions import Fraction
from math import isqrt

import numpy as np

from privstream.noise.bernoulli import (
    _bernoulli_exp,
    _bernoulli_exp_minus_one,
    _bernoulli_exp_unit,
    as_fraction,
)
from privstream.noise.rng import RandomSource, resolve
from privstream.noise.vectorised import DEFAULT_LIMITS, Limits, fast_path, gaussian_array, laplace_array
from privstream.validation import check_int

logger = logging.getLogger(__name__)

_INT64_MAX = 2**63 - 1

#: Below this many draws the array helpers use the scalar kernels: the vectorised path's fixed cost
#: per call (≈ 0.1–0.2 ms) exceeds ≈ 17 µs per scalar draw (measured: equal near 12–16 draws).
SMALL_ARRAY = 12


def positive_rational(value: Fraction | int | float | str, name: str) -> Fraction:
    """``value`` as an exact positive Fraction; ValueError naming ``name`` otherwise."""
    frac = as_fraction(value, name)
    if frac <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return frac


def _discrete_laplace(t: int, s: int, rng: RandomSource) -> int:
    """One sample of the discrete Laplace with scale t/s (CKS Alg. 2; t, s positive integers)."""
    randbelow = rng.randbelow
    while True:
        u = randbelow(t)
        if not _bernoulli_exp_unit(u, t, rng):  # D ← Bernoulli(exp(-U/t)); reject if 0
            continue
        v = 0
        while _bernoulli_exp_minus_one(rng):  # V ← number of Bernoulli(exp(-1)) successes
            v += 1
        y = (u + t * v) // s
        if rng.randbits(1):  # B ← Bernoulli(1/2); reject (B=1, Y=0) so that 0 is not counted twice
            if y == 0:
                continue
            return -y
        return y


def _discrete_gaussian(num: int, den: int, rng: RandomSource) -> int:
    """One sample of the discrete Gaussian with σ² = num/den (CKS Alg. 3).

    t = ⌊σ⌋ + 1; repeat Y ← Lap_Z(t), C ← Bernoulli(exp(-(|Y| - σ²/t)²/(2σ²))) until C = 1.
    The exponent is the exact rational (|Y|·t·den - num)² / (2·num·den·t²).
    """
    t = isqrt(num // den) + 1  # ⌊√(num/den)⌋ = isqrt(⌊num/den⌋)
    two_num_den_t2 = 2 * num * den * t * t
    t_den = t * den
    while True:
        y = _discrete_laplace(t, 1, rng)
        diff = abs(y) * t_den - num
        if _bernoulli_exp(diff * diff, two_num_den_t2, rng):
            return y


def discrete_laplace(scale: Fraction | int | float | str, rng: RandomSource | None = None) -> int:
    """Exact discrete Laplace sample, Pr[Z = z] ∝ exp(-|z|/scale) (CKS 2020, Alg. 2).

    ``scale`` is converted to an exact rational (a float is taken at its exact binary value).
    """
    frac = positive_rational(scale, "scale")
    return _discrete_laplace(frac.numerator, frac.denominator, resolve(rng))


def discrete_gaussian(sigma2: Fraction | int | float | str, rng: RandomSource | None = None) -> int:
    """Exact discrete Gaussian sample, Pr[Y = y] ∝ exp(-y²/(2·sigma2)) (CKS 2020, Alg. 3)."""
    frac = positive_rational(sigma2, "sigma2")
    return _discrete_gaussian(frac.numerator, frac.denominator, resolve(rng))


def _check_count(n: int) -> int:
    return check_int("n", n, minimum=0, allow_numpy=True)


def _to_int64(values: list[int]) -> np.ndarray:
    if values and max(abs(v) for v in values) > _INT64_MAX:  # pragma: no cover - needs scale ~1e17
        raise OverflowError("a noise sample does not fit in int64; use the scalar samplers")
    return np.array(values, dtype=np.int64)


def _scalar_array(
    kernel: Callable[[int, int, RandomSource], int], a: int, b: int, n: int, rng: RandomSource
) -> np.ndarray:
    """The exact scalar fallback: ``n`` independent kernel calls (used where int64 would overflow)."""
    logger.debug("exact scalar sampler for %d draws (%s, %d/%d)", n, kernel.__name__, a, b)
    return _to_int64([kernel(a, b, rng) for _ in range(n)])


def _laplace_array(frac: Fraction, n: int, rng: RandomSource, limits: Limits = DEFAULT_LIMITS) -> np.ndarray:
    """Vectorised CKS Alg. 2 (:mod:`privstream.noise.vectorised`) when scale t/s fits int64
    arithmetic, else the scalar kernel for every draw; ``limits`` lets tests force the fallback."""
    t, s = frac.numerator, frac.denominator
    if fast_path(t, s, limits):
        return laplace_array(t, s, n, rng, limits)
    return _scalar_array(_discrete_laplace, t, s, n, rng)


def _gaussian_array(frac: Fraction, n: int, rng: RandomSource, limits: Limits = DEFAULT_LIMITS) -> np.ndarray:
    """Vectorised CKS Alg. 3 when t = ⌊σ⌋ + 1 <= ``limits.max_t`` (any size of σ²'s numerator and
    denominator), else the scalar kernel for every draw."""
    num, den = frac.numerator, frac.denominator
    if fast_path(isqrt(num // den) + 1, 1, limits):
        return gaussian_array(num, den, n, rng, limits)
    return _scalar_array(_discrete_gaussian, num, den, n, rng)


def discrete_laplace_array(
    scale: Fraction | int | float | str, n: int, rng: RandomSource | None = None
) -> np.ndarray:
    """``n`` i.i.d. exact discrete Laplace samples as an int64 array (CKS 2020, Alg. 2, vectorised:
    :mod:`privstream.noise.vectorised`; fewer than :data:`SMALL_ARRAY` draws use the scalar kernel)."""
    frac = positive_rational(scale, "scale")
    count = _check_count(n)
    if count < SMALL_ARRAY:
        return _scalar_array(_discrete_laplace, frac.numerator, frac.denominator, count, resolve(rng))
    return _laplace_array(frac, count, resolve(rng))


def discrete_gaussian_array(
    sigma2: Fraction | int | float | str, n: int, rng: RandomSource | None = None
) -> np.ndarray:
    """``n`` i.i.d. exact discrete Gaussian samples as an int64 array (CKS 2020, Alg. 3,
    vectorised: :mod:`privstream.noise.vectorised`; fewer than :data:`SMALL_ARRAY` draws use the
    scalar kernel)."""
    frac = positive_rational(sigma2, "sigma2")
    count = _check_count(n)
    if count < SMALL_ARRAY:
        return _scalar_array(_discrete_gaussian, frac.numerator, frac.denominator, count, resolve(rng))
    return _gaussian_array(frac, count, resolve(rng))
