"""The efficient domain-wide top-k has the same output law as the naive one (d noise draws), and
its order statistics of many i.i.d. discrete Laplace values are exact.

All comparisons are chi-square tests with fixed seeds at α = 1e-3 (false-failure rate 1e-3 each).
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privstream.mechanisms import noisy_top_k, noisy_top_k_naive
from privstream.mechanisms.domain_topk import declared_domain
from privstream.mechanisms.order_statistics import TopNoiseLevels
from privstream.noise import SeededRandomSource

ALPHA = 1e-3


def two_sample_p(a: list, b: list) -> float:
    """Chi-square homogeneity test of two samples of categorical outcomes (rare cells pooled)."""
    ca, cb = Counter(a), Counter(b)
    cats = sorted(set(ca) | set(cb), key=lambda c: -(ca[c] + cb[c]))
    rows, other = [], [0, 0]
    for c in cats:
        if ca[c] + cb[c] >= 20:
            rows.append([ca[c], cb[c]])
        else:
            other[0] += ca[c]
            other[1] += cb[c]
    if sum(other) > 0:
        rows.append(other)
    return float(stats.chi2_contingency(np.array(rows)).pvalue)


def summary(out: list, stored: dict) -> tuple:
    keys = {x for x, _ in out}
    top = max((v for _, v in out), default=None)
    return (tuple(sorted(keys & stored.keys())), len(keys - stored.keys()), top)


@pytest.mark.parametrize(("min_value", "k"), [(None, 4), (1, 4), (None, 1)])
def test_efficient_matches_naive_in_distribution(min_value: int | None, k: int) -> None:
    stored = {3: 6, 17: 2, 25: 9}
    domain = range(30)
    scale = Fraction(3, 2)
    runs = 2500
    rng_a, rng_b = SeededRandomSource(101), SeededRandomSource(102)
    fast = [
        summary(noisy_top_k(stored, domain, k, scale, rng_a, min_value=min_value, naive_limit=0), stored)
        for _ in range(runs)
    ]
    slow = [
        summary(noisy_top_k_naive(stored, domain, k, scale, rng_b, min_value=min_value), stored)
        for _ in range(runs)
    ]
    assert two_sample_p([s[:2] for s in fast], [s[:2] for s in slow]) > ALPHA  # which keys
    assert two_sample_p([s[2] for s in fast], [s[2] for s in slow]) > ALPHA  # largest value


def test_naive_comparison_has_power() -> None:
    """The same comparison rejects a different scale (sanity check of the test's power)."""
    stored = {3: 6, 17: 2, 25: 9}
    rng_a, rng_b = SeededRandomSource(103), SeededRandomSource(104)
    fast = [
        summary(noisy_top_k(stored, range(30), 4, Fraction(5, 2), rng_a, naive_limit=0), stored)
        for _ in range(1500)
    ]
    slow = [
        summary(noisy_top_k_naive(stored, range(30), 4, Fraction(3, 2), rng_b), stored) for _ in range(1500)
    ]
    assert two_sample_p([s[2] for s in fast], [s[2] for s in slow]) < ALPHA


def log_cdf(z: int, t: float) -> float:
    a = math.exp(-1 / t)
    return math.log1p(-math.exp(-(z + 1) / t) / (1 + a)) if z >= 0 else z / t - math.log1p(a)


@pytest.mark.parametrize(("n", "scale"), [(10**6, Fraction(5)), (10**12, Fraction(1, 2))])
def test_max_of_many_matches_exact_law(n: int, scale: Fraction) -> None:
    """Pr[max of N i.i.d. <= z] = F(z)^N for N up to 1e12 (impossible to sample naively).
    Cells: consecutive levels merged until each expects >= 20 draws."""
    rng = SeededRandomSource(105)
    t = float(scale)
    runs = 2000
    maxima = Counter(TopNoiseLevels(n, scale, rng).next() for _ in range(runs))
    cdf = lambda z: math.exp(n * log_cdf(z, t))  # noqa: E731
    lo = min(maxima) - 1
    observed, expected, start = [], [], lo
    for z in range(lo, max(maxima) + 1):
        mass = cdf(z) - (cdf(start - 1) if start > lo else 0.0)
        if runs * mass >= 20:
            observed.append(sum(maxima[y] for y in range(start, z + 1)))
            expected.append(runs * mass)
            start = z + 1
    observed.append(sum(v for y, v in maxima.items() if y >= start))
    expected.append(runs * (1 - cdf(start - 1)))
    if expected[-1] < 20:  # fold a thin upper tail into the previous cell
        observed[-2:] = [observed[-2] + observed[-1]]
        expected[-2:] = [expected[-2] + expected[-1]]
    assert sum(observed) == runs
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_second_largest_is_below_largest_and_large_domain_is_fast_path() -> None:
    gen = TopNoiseLevels(10**9, Fraction(20), SeededRandomSource(106))
    levels = [gen.next() for _ in range(50)]
    assert levels == sorted(levels, reverse=True)
    out = noisy_top_k({5: 10**6}, range(10**12), 10, Fraction(20), SeededRandomSource(107))
    assert len(out) == 10 and (5, out[[x for x, _ in out].index(5)][1]) in out


def test_domain_validation() -> None:
    rng = SeededRandomSource(1)
    with pytest.raises(ValueError, match="duplicate"):
        noisy_top_k({}, ["a", "a"], 1, Fraction(1), rng)
    with pytest.raises(ValueError, match="domain"):
        declared_domain([])
    with pytest.raises(TypeError, match="domain"):
        declared_domain("abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k"):
        noisy_top_k({}, ["a"], 0, Fraction(1), rng)
    out = noisy_top_k({"b": 50}, ["a", "b", "c"], 1, Fraction(1), rng)
    assert out[0][0] == "b"


@pytest.mark.parametrize(
    ("domain", "naive_limit"), [(range(10, 40), 0), (range(10, 40), 2048), ([f"s{i}" for i in range(30)], 0)]
)
def test_stored_keys_outside_the_domain_are_dropped_before_noising(domain, naive_limit: int) -> None:  # noqa: ANN001
    """A stored key outside the declared domain is never an error (the outcome of a release must not
    depend on the data) and is dropped before any noise is drawn: with the same seed the output is
    exactly the output without it, on both the fast and the naive path."""
    inside = {domain[3]: 40, domain[7]: 25}
    outside = {"zz-secret": 99, 5: 70, -1: 3}  # str not in a range, ints not in a str list/range
    for seed in range(5):
        got = noisy_top_k(
            {**inside, **outside}, domain, 3, Fraction(2), SeededRandomSource(seed), naive_limit=naive_limit
        )
        want = noisy_top_k(inside, domain, 3, Fraction(2), SeededRandomSource(seed), naive_limit=naive_limit)
        assert got == want and len(got) == 3
        assert all(declared_domain(domain).position(x) is not None for x, _ in got)
    naive = noisy_top_k_naive({**inside, **outside}, domain, 2, Fraction(2), SeededRandomSource(9))
    assert naive == noisy_top_k_naive(inside, domain, 2, Fraction(2), SeededRandomSource(9))


def test_domain_wider_than_ssize_t() -> None:
    """All int64 ids as the declared domain: d = 2**64 (len() of such a range overflows)."""
    everything = range(-(2**63), 2**63)
    assert declared_domain(everything).size == 2**64
    assert declared_domain(range(0, 10, 3)).size == 4
    assert declared_domain(range(10, 0, -4)).size == 3
    with pytest.raises(ValueError, match="domain"):
        declared_domain(range(2**64))  # would release ids that are not items
    out = noisy_top_k({7: 10**6, "x": 10**6}, everything, 2, Fraction(3), SeededRandomSource(8))
    assert len(out) == 2 and 7 in dict(out) and "x" not in dict(out)
