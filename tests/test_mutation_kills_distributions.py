"""The tails and searches of privstream.noise.distributions, checked against independent
computations (issue 23's noise unit: ``python benchmarks/mutation.py noise``).

These functions set GSHM's τ, the PMG / Laplace / exact thresholds and the stated noise bounds, so
an off-by-one in a tail or a search is a wrong privacy parameter. Every test is deterministic:

* the discrete Laplace tails against their closed forms in exact rational arithmetic of a 60-digit
  α (including where the tail is small, so a formula that cancels catastrophically fails);
* the discrete Gaussian pmf and tails against a direct 60-digit summation of exp(−y²/2σ²), for a
  very small σ² (the table's half-width matters there) as well as ordinary ones;
* tails are probabilities (in [0, 1]), non-increasing, 1 at and below 0 for |Y|, and defined past
  the table's end;
* ``smallest_satisfying`` against a brute-force scan over every (lower, start, threshold) of a
  small grid, including predicates true below ``lower``, and its evaluation count: galloping from a
  guess costs O(log distance) evaluations (each one is a full δ computation in GSHM's calibration);
* ``smallest_abs_bound``'s union bound met with equality, and its β range.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest

from privstream.noise.distributions import (
    discrete_gaussian_abs_tail,
    discrete_gaussian_pmf,
    discrete_gaussian_tail,
    discrete_laplace_abs_tail,
    discrete_laplace_pmf,
    discrete_laplace_tail,
    smallest_abs_bound,
    smallest_satisfying,
)

DIGITS = 60


def laplace_tail_reference(m: int, scale: float) -> float:
    """Pr[Z >= m] = Σ_{z >= m} (1−α)/(1+α)·α^|z|, summed in closed form per side at 60 digits."""
    with localcontext() as ctx:
        ctx.prec = DIGITS
        a = (Decimal(-1) / Decimal(scale)).exp()
        norm = (1 - a) / (1 + a)
        if m >= 1:
            return float(norm * a**m / (1 - a))
        # Σ_{z=m}^{-1} α^{-z} + Σ_{z>=0} α^z
        negative = sum((a**k for k in range(1, 1 - m)), Decimal(0))
        return float(norm * (negative + 1 / (1 - a)))


def gaussian_reference(sigma2: float, radius: int = 2000) -> tuple[dict[int, Decimal], Decimal]:
    """The unnormalised weights exp(−y²/2σ²) for |y| <= radius and their sum, at 60 digits."""
    with localcontext() as ctx:
        ctx.prec = DIGITS
        s = Decimal(sigma2)
        weights = {y: (Decimal(-y * y) / (2 * s)).exp() for y in range(-radius, radius + 1)}
        return weights, sum(weights.values(), Decimal(0))


def gaussian_tail_reference(m: int, sigma2: float) -> float:
    weights, total = gaussian_reference(sigma2)
    with localcontext() as ctx:
        ctx.prec = DIGITS
        return float(sum((w for y, w in weights.items() if y >= m), Decimal(0)) / total)


@pytest.mark.parametrize("scale", [0.1, 0.5, 1.0, 3.7, 40.0])
@pytest.mark.parametrize("m", [-3, -1, 0, 1, 2, 5])
def test_discrete_laplace_tails_match_the_closed_form_to_1e_13_relative(scale: float, m: int) -> None:
    """At m = 1 and a small scale the tail is ~e^-10: the other branch's 1 − α^(1−m)/(1+α) would lose
    about 11 of 16 digits there to cancellation."""
    want = laplace_tail_reference(m, scale)
    assert discrete_laplace_tail(m, scale) == pytest.approx(want, rel=1e-13, abs=0)
    want_abs = 1.0 if m <= 0 else 2 * want
    assert discrete_laplace_abs_tail(m, scale) == pytest.approx(want_abs, rel=1e-13, abs=0)


@pytest.mark.parametrize("m", [-5, -1, 0])
def test_abs_tails_are_exactly_one_at_and_below_zero(m: int) -> None:
    assert discrete_laplace_abs_tail(m, 2.0) == 1.0
    assert discrete_gaussian_abs_tail(m, 2.0) == 1.0


@pytest.mark.parametrize("sigma2", [0.01, 0.3, 1.0, 2.5, 100.0])
@pytest.mark.parametrize("m", [0, 1, 2, 3, 7])
def test_discrete_gaussian_tails_match_a_direct_summation(sigma2: float, m: int) -> None:
    want = gaussian_tail_reference(m, sigma2)
    got = discrete_gaussian_tail(m, sigma2)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-300)
    want_abs = 1.0 if m <= 0 else min(1.0, 2 * want)
    assert discrete_gaussian_abs_tail(m, sigma2) == pytest.approx(want_abs, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("sigma2", [0.01, 0.3, 1.0, 100.0])
def test_discrete_gaussian_pmf_matches_a_direct_summation(sigma2: float) -> None:
    weights, total = gaussian_reference(sigma2)
    ys = np.arange(-6, 7)
    got = discrete_gaussian_pmf(ys, sigma2)
    assert isinstance(got, np.ndarray) and got.shape == ys.shape
    for y, g in zip(ys.tolist(), got.tolist(), strict=True):
        assert g == pytest.approx(float(weights[y] / total), rel=1e-12, abs=1e-300)
    one = discrete_gaussian_pmf(0, sigma2)
    assert type(one) is float and one == pytest.approx(float(weights[0] / total), rel=1e-12)
    assert discrete_gaussian_pmf(10**9, sigma2) == 0.0
    assert discrete_laplace_pmf(0, 1.0) == pytest.approx(math.tanh(0.5), rel=1e-15)


@pytest.mark.parametrize("sigma2", [0.01, 1.0, 2.5, 100.0])
def test_discrete_gaussian_tail_is_a_non_increasing_probability_everywhere(sigma2: float) -> None:
    """From far below the summation table to far above it (its end must give 0, not an index
    error), with exactly 1 far below."""
    span = int(60 * math.sqrt(sigma2)) + 30
    tails = [discrete_gaussian_tail(m, sigma2) for m in range(-span, span + 1)]
    assert tails[0] == 1.0 and tails[-1] == 0.0
    assert all(0.0 <= t <= 1.0 for t in tails)
    assert all(b <= a for a, b in zip(tails, tails[1:], strict=False))
    assert discrete_gaussian_tail(-(10**9), sigma2) == 1.0


def test_non_positive_scales_are_refused_by_name() -> None:
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="scale must be > 0"):
            discrete_laplace_pmf(0, bad)
        with pytest.raises(ValueError, match="sigma2 must be > 0"):
            discrete_gaussian_pmf(0, bad)


def brute_force(threshold: int, lower: int) -> int:
    return max(threshold, lower)


@pytest.mark.parametrize("lower", [-3, 0, 5])
def test_smallest_satisfying_matches_a_brute_force_scan(lower: int) -> None:
    """For pred(m) = m >= t (monotone; true below ``lower`` when t < lower, where the answer is
    ``lower`` itself) and every guess, galloping up or down."""
    for start in (None, -10, 0, 4, 5, 6, 9, 40, 1000):
        for t in range(-8, 50):
            seen: list[int] = []

            def pred(m: int, t: int = t, seen: list[int] = seen) -> bool:
                seen.append(m)
                return m >= t

            assert smallest_satisfying(pred, lower, start) == brute_force(t, lower), (lower, start, t)
            assert min(seen) >= lower - 1  # never evaluated further below lower than the invariant


@pytest.mark.parametrize("distance", [0, 1, 7, 1000, 10**6])
@pytest.mark.parametrize("side", [-1, 1])
def test_smallest_satisfying_gallops_in_logarithmically_many_evaluations(distance: int, side: int) -> None:
    """A guess at distance D from the answer costs at most 3·log2(D + 2) + 4 evaluations (galloping
    then bisection: about 2·log2 D), wherever the answer lies; a guess is not ignored."""
    answer = 10**9
    calls = 0

    def pred(m: int) -> bool:
        nonlocal calls
        calls += 1
        return m >= answer

    assert smallest_satisfying(pred, 0, answer + side * distance) == answer
    assert calls <= 3 * math.log2(distance + 2) + 4, calls


def test_smallest_abs_bound_meets_the_union_bound_with_equality() -> None:
    """count · Pr[|X| > b] <= β holds with equality at b = 1 for Pr[|X| >= m] = 2^-m, β = 1/4."""
    assert smallest_abs_bound(lambda m: 0.5**m, 1, 0.25) == 1
    assert smallest_abs_bound(lambda m: 0.5**m, 2, 0.25) == 2
    assert smallest_abs_bound(lambda m: 0.5**m, 1, 0.2) == 2


@pytest.mark.parametrize("beta", [0.0, 1.0, 1.5, -0.1])
def test_smallest_abs_bound_refuses_beta_outside_the_open_unit_interval(beta: float) -> None:
    with pytest.raises(ValueError, match="beta must lie in"):
        smallest_abs_bound(lambda m: 0.0 if m > 3 else 1.0, 1, beta)
