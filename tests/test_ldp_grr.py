"""Generalised randomised response: exact rational probabilities, unbiased estimator, interface."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privstream.ldp import GeneralizedRandomizedResponse, LdpReport, LocalRandomiser, rational_exp_lower
from privstream.noise.rng import CryptoRandomSource, SeededRandomSource


@pytest.mark.parametrize("epsilon", [1e-6, 0.1, 1.0, math.log(3), 5.0, 50.0, Fraction(1, 3)])
def test_rational_exp_is_a_tight_lower_bound(epsilon: float | Fraction) -> None:
    ratio = rational_exp_lower(epsilon)
    exact = math.exp(float(epsilon))
    assert ratio.denominator <= 2**40
    assert float(ratio) <= exact * (1 + 1e-15)  # float(e^ε) itself has 1e-16 relative error
    assert ratio > 0 and (exact - float(ratio)) / exact < 2e-12
    # checked exactly for small ε: the upper neighbour a+1 would exceed e^ε
    if float(epsilon) <= 5:
        from decimal import Decimal, localcontext

        with localcontext() as ctx:
            ctx.prec = 80
            e = (
                Decimal(epsilon.numerator) / Decimal(epsilon.denominator)
                if isinstance(epsilon, Fraction)
                else Decimal(epsilon)
            ).exp()
            assert Decimal(ratio.numerator) / Decimal(ratio.denominator) <= e
            assert Decimal(ratio.numerator + 1) / Decimal(ratio.denominator) > e


def test_probabilities_are_exact_and_never_exceed_epsilon() -> None:
    grr = GeneralizedRandomizedResponse(1.0, 10, rng=SeededRandomSource(0))
    assert grr.p + 9 * grr.q == 1
    assert grr.p / grr.q == Fraction(grr.weight_true, grr.weight_other)
    assert grr.effective_epsilon <= 1.0 and 1.0 - grr.effective_epsilon < 1e-11
    # the textbook p = e^ε / (e^ε + d − 1)
    assert abs(float(grr.p) - math.e / (math.e + 9)) < 1e-12


def test_output_distribution_is_grr_chi_square() -> None:
    """True value 3 of d = 6, ε = 1, 60k draws: chi-square goodness of fit against the exact (p, q).
    Seeded; threshold at the 1e-4 upper tail, so a correct sampler fails with probability 1e-4."""
    grr = GeneralizedRandomizedResponse(1.0, 6, rng=SeededRandomSource(7))
    n = 60_000
    observed = np.bincount([grr.randomise_index(3) for _ in range(n)], minlength=6)
    expected = np.array([float(grr.q)] * 6) * n
    expected[3] = float(grr.p) * n
    statistic = float(((observed - expected) ** 2 / expected).sum())
    assert statistic < stats.chi2.ppf(1 - 1e-4, df=5)


def test_estimator_is_exactly_unbiased_in_expectation() -> None:
    """E[C_v] = c·p + (n−c)·q; plugging it into the estimator gives c exactly (exact fractions)."""
    grr = GeneralizedRandomizedResponse(0.7, 13, rng=SeededRandomSource(1))
    n = 1000
    for c in (0, 1, 250, 1000):
        expected_count = c * grr.p + (n - c) * grr.q
        estimate = (expected_count * grr.total_weight - n * grr.weight_other) / (
            grr.weight_true - grr.weight_other
        )
        assert estimate == c
        assert grr.estimate_exact(int(expected_count), n) == Fraction(
            int(expected_count) * grr.total_weight - n * grr.weight_other, grr.weight_true - grr.weight_other
        )


def test_estimator_unbiased_statistically() -> None:
    """n = 50k reports from a skewed distribution on d = 8 (ε = 1). For each value,
    |ĉ − c| ≤ 4.5·sd (sd from the exact variance formula): false-failure rate
    ≤ 8 · 6.8e-6 ≈ 5.4e-5 under the normal approximation; the seed is fixed."""
    grr = GeneralizedRandomizedResponse(1.0, list("abcdefgh"), rng=SeededRandomSource(2024))
    truth = {"a": 20_000, "b": 12_000, "c": 8_000, "d": 5_000, "e": 3_000, "f": 2_000, "g": 0, "h": 0}
    values = [v for v, c in truth.items() for _ in range(c)]
    aggregator = grr.new_aggregator()
    aggregator.add_all(grr.encode(v) for v in values)
    assert aggregator.n == len(values) == 50_000
    estimates = aggregator.estimate_items()
    assert abs(sum(estimates.values()) - len(values)) < 1e-6  # the estimates always sum to n
    for value, true_count in truth.items():
        sd = math.sqrt(grr.variance(true_count, len(values)))
        assert abs(estimates[value] - true_count) <= 4.5 * sd, (value, estimates[value], true_count, sd)


def test_reports_and_interface() -> None:
    grr = GeneralizedRandomizedResponse(2.0, ["x", "y", 3], rng=SeededRandomSource(5))
    assert isinstance(grr, LocalRandomiser)
    report = grr.encode("x")
    assert isinstance(report, LdpReport) and report.scheme == "grr" and report.state_version == 0
    assert report.payload in (b"\x00", b"\x01", b"\x02")
    assert grr.accepts(report)
    other = GeneralizedRandomizedResponse(2.0, ["x", "y", 4])
    assert not other.accepts(report)  # different domain digest
    with pytest.raises(ValueError, match="report"):
        other.new_aggregator().add(report)
    big = GeneralizedRandomizedResponse(1.0, 70_000)
    assert len(big.encode(69_999).payload) == 3


def test_default_source_is_the_csprng() -> None:
    assert isinstance(GeneralizedRandomizedResponse(1.0, 4)._rng, CryptoRandomSource)


def test_unknown_value_error_does_not_echo_the_value() -> None:
    grr = GeneralizedRandomizedResponse(1.0, ["a", "b"])
    with pytest.raises(ValueError, match="withheld") as info:
        grr.encode("secret-value-xyz")
    assert "secret-value-xyz" not in str(info.value)
    with pytest.raises(ValueError, match="withheld"):
        GeneralizedRandomizedResponse(1.0, 4).encode(4)


@pytest.mark.parametrize(
    ("args", "param", "error"),
    [
        ((0.0, 4), "epsilon", ValueError),
        ((-1.0, 4), "epsilon", ValueError),
        ((float("inf"), 4), "epsilon", ValueError),
        ((True, 4), "epsilon", TypeError),
        ((1e-14, 4), "epsilon", ValueError),
        ((1.0, 1), "domain", ValueError),
        ((1.0, ["a", "a"]), "domain", ValueError),
        ((1.0, [1.5, 2.5]), "domain", TypeError),
        ((1.0, True), "domain", TypeError),
    ],
)
def test_bad_parameters_fail_fast(args: tuple, param: str, error: type) -> None:
    with pytest.raises(error, match=param):
        GeneralizedRandomizedResponse(*args)
