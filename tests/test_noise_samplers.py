"""Goodness of fit of the exact samplers (CKS 2020 Algs. 1–3) against their exact pmfs.

Every chi-square test uses a fixed SeededRandomSource seed and rejects at α = 1e-3, so a correct
sampler fails a given test with probability 1e-3 for a fresh seed (and deterministically never with
the fixed seeds here); a wrong pmf (e.g. the wrong scale, or a missing zero-rejection) is detected
with overwhelming probability at these sample sizes.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privstream.noise import (
    CryptoRandomSource,
    SeededRandomSource,
    bernoulli,
    bernoulli_exp,
    discrete_gaussian,
    discrete_gaussian_array,
    discrete_laplace,
    discrete_laplace_array,
    resolve,
)
from privstream.noise.distributions import (
    discrete_gaussian_pmf,
    discrete_gaussian_tail,
    discrete_laplace_pmf,
    discrete_laplace_tail,
    smallest_abs_bound,
)
from tests.chi_square import pool_cells

ALPHA = 1e-3


def chi_square_p(samples: np.ndarray, pmf) -> float:  # noqa: ANN001
    """p-value of a chi-square GOF test; cells with expected count < 5 are pooled into the tails."""
    n = samples.size
    values, counts = np.unique(samples, return_counts=True)
    lo, hi = int(values.min()), int(values.max())
    support = np.arange(lo, hi + 1)
    expected = n * np.asarray([pmf(int(z)) for z in support])
    observed = np.zeros(support.size)
    observed[values - lo] = counts
    # tails beyond the observed range go into the end cells
    expected[0] += n * sum(pmf(z) for z in range(lo - 200, lo))
    expected[-1] += n * sum(pmf(z) for z in range(hi + 1, hi + 200))
    obs_cells, exp_cells = pool_cells(observed, expected)
    return float(stats.chisquare(obs_cells, exp_cells).pvalue)


@pytest.mark.parametrize("p", [Fraction(0), Fraction(1), Fraction(1, 3), Fraction(999, 1000)])
def test_bernoulli_rational(p: Fraction) -> None:
    rng = SeededRandomSource(11)
    n = 20000
    hits = sum(bernoulli(p, rng) for _ in range(n))
    if p in (0, 1):
        assert hits == n * p
    else:
        assert stats.binomtest(hits, n, float(p)).pvalue > ALPHA


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 7), Fraction(1), Fraction(5, 2), Fraction(7)])
def test_bernoulli_exp(gamma: Fraction) -> None:
    rng = SeededRandomSource(12)
    n = 20000
    hits = sum(bernoulli_exp(gamma, rng) for _ in range(n))
    assert stats.binomtest(hits, n, math.exp(-float(gamma))).pvalue > ALPHA


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(1), Fraction(3, 2), Fraction(10), 1 / 0.7])
def test_discrete_laplace_fits_pmf(scale: Fraction | float) -> None:
    samples = discrete_laplace_array(scale, 20000, SeededRandomSource(13))
    assert samples.dtype == np.int64
    p = chi_square_p(samples, lambda z: float(discrete_laplace_pmf(z, float(scale))))
    assert p > ALPHA


def test_discrete_laplace_wrong_scale_is_detected() -> None:
    """Power check of the same test: scale 3/2 samples against the scale-1 pmf must be rejected."""
    samples = discrete_laplace_array(Fraction(3, 2), 20000, SeededRandomSource(14))
    assert chi_square_p(samples, lambda z: float(discrete_laplace_pmf(z, 1.0))) < ALPHA


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(1), Fraction(5, 2), Fraction(100)])
def test_discrete_gaussian_fits_pmf(sigma2: Fraction) -> None:
    samples = discrete_gaussian_array(sigma2, 20000, SeededRandomSource(15))
    assert samples.dtype == np.int64
    p = chi_square_p(samples, lambda z: discrete_gaussian_pmf(z, float(sigma2)))
    assert p > ALPHA


def test_discrete_gaussian_wrong_variance_is_detected() -> None:
    samples = discrete_gaussian_array(Fraction(5, 2), 20000, SeededRandomSource(16))
    assert chi_square_p(samples, lambda z: discrete_gaussian_pmf(z, 2.0)) < ALPHA


def test_scalar_samplers_and_default_source() -> None:
    assert isinstance(resolve(None), CryptoRandomSource)
    assert isinstance(discrete_laplace(2), int)
    assert isinstance(discrete_gaussian(Fraction(9, 4)), int)
    a = discrete_laplace_array(3, 50, SeededRandomSource(1))
    b = discrete_laplace_array(3, 50, SeededRandomSource(1))
    assert np.array_equal(a, b)  # seeded sources are reproducible
    assert discrete_laplace_array(3, 0).shape == (0,)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: discrete_laplace(0), "scale"),
        (lambda: discrete_laplace(-1.5), "scale"),
        (lambda: discrete_gaussian(0), "sigma2"),
        (lambda: discrete_laplace(float("nan")), "scale"),
        (lambda: bernoulli(Fraction(3, 2)), "p"),
        (lambda: bernoulli_exp(Fraction(-1)), "gamma"),
        (lambda: discrete_laplace_array(1, -1), "n"),
    ],
)
def test_bad_parameters_name_the_parameter(call, name: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=name):
        call()


def test_floats_rejected_where_exactness_matters() -> None:
    with pytest.raises(TypeError, match="p"):
        bernoulli(0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gamma"):
        bernoulli_exp(0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="scale"):
        discrete_laplace(True)  # type: ignore[arg-type]


def test_tails_match_pmf_sums() -> None:
    for scale in (0.5, 3.0, 40.0):
        for m in (-3, 0, 1, 5):
            direct = sum(float(discrete_laplace_pmf(z, scale)) for z in range(m, m + 4000))
            assert discrete_laplace_tail(m, scale) == pytest.approx(direct, rel=1e-9)
    for s2 in (0.3, 4.0, 250.0):
        for m in (-2, 0, 3, 20):
            direct = sum(discrete_gaussian_pmf(z, s2) for z in range(m, m + 2000))
            assert discrete_gaussian_tail(m, s2) == pytest.approx(direct, rel=1e-9, abs=1e-300)


def test_smallest_abs_bound_is_minimal() -> None:
    tail = lambda m: 2 * discrete_laplace_tail(m, 5.0) if m >= 1 else 1.0  # noqa: E731
    b = smallest_abs_bound(tail, 100, 0.05)
    assert 100 * tail(b + 1) <= 0.05 < 100 * tail(b)


def test_moments_match_opendp_if_installed() -> None:
    """Optional cross-check against OpenDP's samplers (skipped when opendp is absent): sample
    variances of ours and theirs agree within 6 standard errors (false failure < 1e-8)."""
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    n = 10000
    ours = discrete_laplace_array(Fraction(4), n, SeededRandomSource(17)).astype(float)
    space = dp.atom_domain(T=int), dp.absolute_distance(T=int)
    meas = dp.m.make_laplace(*space, scale=4.0)
    theirs = np.array([meas(0) for _ in range(n)], dtype=float)
    a = math.exp(-1 / 4)
    var = 2 * a / (1 - a) ** 2
    se = var * math.sqrt(2 / n) * 3  # heavy-ish tails: generous standard error of the variance
    assert abs(ours.var() - var) < 6 * se
    assert abs(theirs.var() - var) < 6 * se
    gauss = dp.m.make_gaussian(*space, scale=3.0)  # OpenDP's discrete Gaussian on integers
    ours_g = discrete_gaussian_array(Fraction(9), n, SeededRandomSource(18)).astype(float)
    theirs_g = np.array([gauss(0) for _ in range(n)], dtype=float)
    var_g = sum(z * z * discrete_gaussian_pmf(z, 9.0) for z in range(-60, 61))
    se_g = var_g * math.sqrt(2 / n)
    assert abs(ours_g.var() - var_g) < 6 * se_g
    assert abs(theirs_g.var() - var_g) < 6 * se_g
