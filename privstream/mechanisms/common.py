"""Small shared pieces of the mechanisms: exact noise scales, per-key noising, output ordering."""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from privstream.accounting.budget import exact_value
from privstream.noise.discrete import _discrete_gaussian, _discrete_laplace
from privstream.noise.rng import RandomSource
from privstream.sketches import Dummy, Key, item_order_key


def check_epsilon(epsilon: float) -> float:
    if (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, int | float | Fraction)
        or not 0 < epsilon < float("inf")
    ):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    return float(epsilon)


def check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, int | float | Fraction) or not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    return float(delta)


def laplace_scale(sensitivity: int | Fraction, epsilon: float) -> Fraction:
    """Exact rational scale Δ/ε of the discrete Laplace, with ε read as the same exact rational the
    ledger charges (:func:`~privstream.accounting.budget.exact_value`), so the noise provides exactly
    the reported ε."""
    return Fraction(sensitivity) / exact_value(check_epsilon(epsilon))


def add_laplace(
    counts: Iterable[tuple[Key, int]], scale: Fraction, rng: RandomSource
) -> list[tuple[Key, int]]:
    t, s = scale.numerator, scale.denominator
    return [(x, c + _discrete_laplace(t, s, rng)) for x, c in counts]


def add_gaussian(
    counts: Iterable[tuple[Key, int]], sigma2: Fraction, rng: RandomSource
) -> list[tuple[Key, int]]:
    num, den = sigma2.numerator, sigma2.denominator
    return [(x, c + _discrete_gaussian(num, den, rng)) for x, c in counts]


def threshold_and_sort(noisy: Iterable[tuple[Key, int]], threshold: int) -> tuple[tuple[Key, int], ...]:
    """Keep noisy values >= threshold (inclusive), drop Alg. 1 dummy keys *after* thresholding, and
    order by the universe's total order (data-independent)."""
    kept = [(x, v) for x, v in noisy if v >= threshold and type(x) is not Dummy]
    return tuple(sorted(kept, key=lambda p: item_order_key(p[0])))
