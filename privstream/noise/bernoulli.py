"""Exact Bernoulli samplers (Canonne–Kamath–Steinke 2020, "The Discrete Gaussian for Differential
Privacy", Algorithm 1).

All arithmetic is on Python integers: a rational probability is a pair (numerator, denominator)
and every random choice is one :meth:`RandomSource.randbelow` call, so the output distribution is
exactly the stated one (no floating point anywhere). The ``_``-prefixed integer kernels are used by
the discrete Laplace and Gaussian samplers; the public functions validate their arguments.
"""

from __future__ import annotations

from fractions import Fraction

from privstream.noise.rng import RandomSource, resolve


def as_fraction(value: Fraction | int | float | str, name: str) -> Fraction:
    """``value`` as an exact :class:`Fraction` (floats are converted exactly, never rounded)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number, not a bool")
    if isinstance(value, Fraction | int | str):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{name} must be finite, got {value}")
        return Fraction(value)
    raise TypeError(f"{name} must be a Fraction, int, float or str, not {type(value).__name__}")


def _bernoulli_rational(num: int, den: int, rng: RandomSource) -> bool:
    """True with probability num/den exactly (0 <= num <= den, den >= 1)."""
    return rng.randbelow(den) < num


def _bernoulli_exp_unit(num: int, den: int, rng: RandomSource) -> bool:
    """True with probability exp(-num/den) for 0 <= num/den <= 1 (CKS Alg. 1, γ ∈ [0, 1] branch).

    K ← 1; repeat: A ← Bernoulli(γ/K); stop when A = 0, else K ← K + 1. Return [K is odd].
    """
    k = 1
    while rng.randbelow(den * k) < num:
        k += 1
    return k & 1 == 1


def _bernoulli_exp_minus_one(rng: RandomSource) -> bool:
    """True with probability exp(-1): CKS Alg. 1 with γ = 1, whose first trial Bernoulli(1) always
    succeeds, so the loop starts at K = 2."""
    k = 2
    while rng.randbelow(k) == 0:
        k += 1
    return k & 1 == 1


def _bernoulli_exp(num: int, den: int, rng: RandomSource) -> bool:
    """True with probability exp(-num/den) for num/den >= 0 (CKS Alg. 1, γ > 1 branch:
    ⌊γ⌋ independent Bernoulli(exp(-1)) trials, then one Bernoulli(exp(-(γ - ⌊γ⌋))))."""
    whole, rem = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_minus_one(rng):
            return False
    return _bernoulli_exp_unit(rem, den, rng)


def bernoulli(p: Fraction | int | str, rng: RandomSource | None = None) -> bool:
    """Exact Bernoulli(p) for a rational 0 <= p <= 1 (floats are rejected: pass a Fraction)."""
    if isinstance(p, float):
        raise TypeError("p must be an exact rational (Fraction/int/str), not a float")
    frac = as_fraction(p, "p")
    if not 0 <= frac <= 1:
        raise ValueError(f"p must lie in [0, 1], got {frac}")
    return _bernoulli_rational(frac.numerator, frac.denominator, resolve(rng))


def bernoulli_exp(gamma: Fraction | int | str, rng: RandomSource | None = None) -> bool:
    """Exact Bernoulli(exp(-gamma)) for a rational gamma >= 0 (CKS 2020, Alg. 1)."""
    if isinstance(gamma, float):
        raise TypeError("gamma must be an exact rational (Fraction/int/str), not a float")
    frac = as_fraction(gamma, "gamma")
    if frac < 0:
        raise ValueError(f"gamma must be >= 0, got {frac}")
    return _bernoulli_exp(frac.numerator, frac.denominator, resolve(rng))
