"""Thresholds and GSHM parameters: the tail computations of Lebeda–Tětek §5–§8, the
exact Thm 8.5 condition vs. Lemma 8.6, and the discrete (sampled) GSHM calibration. Deterministic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privstream.mechanisms import (
    calibrate_gshm,
    gshm_delta_continuous,
    gshm_delta_discrete,
    laplace_threshold,
    laplace_threshold_delta,
    lemma_8_6_parameters,
    pmg_half_threshold,
    pmg_standard_threshold,
    pmg_threshold,
    smallest_tau_continuous,
    smallest_tau_discrete,
)
from privstream.mechanisms.gshm import gaussian_profile, zcdp_profile
from privstream.mechanisms.laplace_threshold import new_key_factor
from privstream.noise.distributions import discrete_gaussian_tail, discrete_laplace_tail

GRID = [(eps, delta) for eps in (0.1, 0.5, 1.0, 2.0, 5.0) for delta in (1e-3, 1e-6, 1e-9, 1e-12)]


@pytest.mark.parametrize(("eps", "delta"), GRID)
def test_discrete_pmg_threshold(eps: float, delta: float) -> None:
    """§5.2: T = 1 + 2t', t' = ⌈ln(6e^ε/((e^ε+1)δ))/ε⌉ with 6·Pr[Geom >= t'] <= δ, and t' is the
    smallest such integer up to one step (the closed form is exact up to the ceiling)."""
    half = pmg_half_threshold(eps, delta)
    closed = math.ceil(math.log(6 * math.exp(eps) / ((math.exp(eps) + 1) * delta)) / eps)
    assert half == closed
    assert pmg_threshold(eps, delta) == 1 + 2 * closed
    assert 6 * discrete_laplace_tail(half, 1 / eps) <= delta
    assert 6 * discrete_laplace_tail(half - 1, 1 / eps) > delta or half == 1
    # Pr[Z >= m] = e^{−εm}·e^ε/(e^ε+1) (the two-sided geometric's tail)
    assert discrete_laplace_tail(half, 1 / eps) == pytest.approx(
        math.exp(-eps * half) * math.exp(eps) / (math.exp(eps) + 1), rel=1e-12
    )


def test_note_table_values() -> None:
    """Note §5 table: geometric thresholds 33 (ε=1, δ=1e-6), 91 (ε=0.5, δ=1e-9), 301 (ε=0.1, δ=1e-6)."""
    assert pmg_threshold(1.0, 1e-6) == 33
    assert pmg_threshold(0.5, 1e-9) == 91
    assert pmg_threshold(0.1, 1e-6) == 301


@pytest.mark.parametrize(("eps", "delta"), GRID)
@pytest.mark.parametrize("k", [1, 16, 1000])
def test_standard_pmg_threshold(eps: float, delta: float, k: int) -> None:
    thr = pmg_standard_threshold(eps, delta, k)
    half = (thr - 1) // 2
    assert thr == 1 + 2 * half
    assert (k + 1) * discrete_laplace_tail(half, 1 / eps) <= delta
    assert half == 1 or (k + 1) * discrete_laplace_tail(half - 1, 1 / eps) > delta
    assert thr >= pmg_threshold(eps, delta) or k < 5  # more keys may differ -> larger threshold


@pytest.mark.parametrize(("eps", "delta"), GRID)
@pytest.mark.parametrize("k", [1, 8, 100, 1000])
def test_laplace_threshold(eps: float, delta: float, k: int) -> None:
    t = laplace_threshold(eps, delta, k)
    assert laplace_threshold_delta(eps, k, t) <= delta
    assert t == 2 or laplace_threshold_delta(eps, k, t - 1) > delta
    # C(ε, k) by brute force
    assert new_key_factor(eps, k) == pytest.approx(
        max(k, *(n * math.exp(eps * (1 - n / k)) for n in range(1, k + 1)))
    )
    # the commonly quoted (unverified) threshold 1 + (k/ε)ln((1+e^ε)k/(2δ)) is valid (our δ formula holds there) but never smaller
    note = 1 + (k / eps) * math.log((1 + math.exp(eps)) * k / (2 * delta))
    assert laplace_threshold_delta(eps, k, math.ceil(note) + 1) <= delta
    assert t <= math.ceil(note) + 1


@pytest.mark.parametrize(
    ("eps", "delta", "ell"), [(0.5, 1e-9, 1000), (0.1, 1e-6, 10000), (0.9, 1e-6, 64), (0.5, 1e-3, 8)]
)
def test_lemma_8_6_satisfies_exact_condition_and_exact_tau_is_smaller(
    eps: float, delta: float, ell: int
) -> None:
    sigma, tau = lemma_8_6_parameters(eps, delta, ell)
    exact_delta = gshm_delta_continuous(eps, sigma, tau, ell)
    assert exact_delta <= delta  # Lemma 8.6 is valid ...
    assert exact_delta < delta / 5  # ... and loose (30–35x was measured)
    tau_exact = smallest_tau_continuous(eps, delta, ell, sigma)
    assert tau_exact < tau
    assert gshm_delta_continuous(eps, sigma, tau_exact, ell) <= delta
    assert gshm_delta_continuous(eps, sigma, tau_exact * (1 - 1e-6), ell) > delta


def test_note_table_lemma_8_6_values() -> None:
    sigma, tau = lemma_8_6_parameters(0.5, 1e-9, 1000)
    assert sigma == pytest.approx(416.1, abs=0.1) and tau == pytest.approx(3131.6, abs=0.1)
    with pytest.raises(ValueError, match="epsilon"):
        lemma_8_6_parameters(1.0, 1e-6, 10)


@pytest.mark.parametrize(
    ("eps", "delta", "ell"), [(1.0, 1e-3, 8), (2.0, 1e-3, 8), (0.5, 1e-9, 1000), (1.0, 1e-6, 100)]
)
def test_discrete_gshm_calibration(eps: float, delta: float, ell: int) -> None:
    p = calibrate_gshm(eps, delta, ell)
    s2 = float(p.sigma2)
    assert gshm_delta_discrete(eps, s2, p.tau, ell) <= delta
    assert p.tau == 0 or gshm_delta_discrete(eps, s2, p.tau - 1, ell) > delta
    assert smallest_tau_discrete(eps, delta, ell, s2) == p.tau
    # error-bound quantile: l·Pr[|Y| > b] <= β
    assert ell * 2 * discrete_gaussian_tail(p.noise_bound + 1, s2) <= p.beta
    if eps < 1:  # smaller than Lemma 8.6's threshold although the privacy analysis is conservative
        assert p.tau < lemma_8_6_parameters(eps, delta, ell)[1]


def test_zcdp_profile_dominates_gaussian_profile() -> None:
    """The conservative bound used for discrete noise is never below the exact continuous δ."""
    j = np.arange(1, 200, dtype=float)
    for sigma in (1.0, 5.0, 40.0):
        for e in (-0.5, 0.0, 0.3, 1.0, 3.0):
            exact = gaussian_profile(j, np.full_like(j, e), sigma)
            bound = zcdp_profile(j / (2 * sigma**2), np.full_like(j, e))
            assert np.all(bound >= exact - 1e-15)


def test_condition_is_monotone_in_tau() -> None:
    taus = range(0, 60, 3)
    deltas = [gshm_delta_discrete(1.0, 67.0, t, 8) for t in taus]
    assert all(a >= b for a, b in zip(deltas, deltas[1:], strict=False))


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: pmg_threshold(0.0, 1e-6), "epsilon"),
        (lambda: pmg_threshold(1.0, 0.0), "delta"),
        (lambda: pmg_standard_threshold(1.0, 1e-6, 0), "k"),
        (lambda: laplace_threshold(1.0, 1.5, 3), "delta"),
        (lambda: calibrate_gshm(1.0, 1e-6, 0), "ell"),
    ],
)
def test_bad_parameters(call, name: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=name):
        call()
