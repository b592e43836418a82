"""Independent oracle for the GSHM calibration (Lebeda–Tětek Thm 8.5, after Wilkins–Kifer–Zhang–Karrer
Thm 5.4).

Nothing here reuses privstream's numerics: the continuous Gaussian profile comes from scipy.stats.norm
(Balle–Wang) and is itself cross-checked by numeric integration with scipy.integrate.quad; the
discrete Gaussian quantities are computed by summing the pmf directly.

Discrete oracle. For P = N_Z(1, σ²)^j and Q = N_Z(0, σ²)^j the privacy loss is (2S − j)/(2σ²) with
S the coordinate sum, so δ_j(e) = Σ_s Pr_Q[S = s − j]·(1 − e^{e − L(s)})_+ exactly. The sum of j
i.i.d. N_Z(0, σ²) has pmf ∝ exp(−s²/(2jσ²)) up to an aliasing error of order exp(−π²σ²/2) (Poisson
summation; < 1e−50 for every σ calibrated here); :func:`test_sum_of_discrete_gaussians_is_discrete_gaussian`
checks this against a direct convolution.
"""

from __future__ import annotations

import math
from functools import cache, lru_cache

import numpy as np
import pytest
from scipy import integrate, stats

from privstream.mechanisms import calibrate_gshm, gshm_delta_continuous, gshm_delta_discrete
from privstream.mechanisms.gshm import gaussian_profile, zcdp_profile

GRID = [(eps, delta, k) for eps in (0.5, 1.0, 2.0) for delta in (1e-6, 1e-9) for k in (4, 64, 1000)]
REL = 1e-6  # where the module and the oracle compute the same quantity


# ---- continuous Gaussian (scipy) --------------------------------------------------------------------


def bw_profile(j: np.ndarray, e: np.ndarray, sigma: float) -> np.ndarray:
    """Balle–Wang exact δ(e) of the Gaussian mechanism, ℓ2 sensitivity √j, via scipy.stats.norm."""
    mu = np.sqrt(np.asarray(j, dtype=float)) / sigma
    e = np.asarray(e, dtype=float)
    out = stats.norm.cdf(mu / 2 - e / mu) - np.exp(e + stats.norm.logcdf(-mu / 2 - e / mu))
    return np.clip(out, 0.0, 1.0)


def integrated_profile(j: int, e: float, sigma: float) -> float:
    """δ(e) = ∫ (φ(x − μ) − e^e φ(x))_+ dx by quadrature (μ = √j/σ; integrand > 0 iff x > x*)."""
    mu = math.sqrt(j) / sigma
    x_star = e / mu + mu / 2

    def f(x: float) -> float:
        return stats.norm.pdf(x - mu) * -math.expm1(e - mu * x + mu * mu / 2)

    lo = max(x_star, -40.0)  # below −40 both densities are < e^{-800}
    hi = max(x_star, mu) + 40.0
    pts = [x for x in (0.0, mu) if lo < x < hi]
    val, _ = integrate.quad(f, lo, hi, points=pts or None, epsabs=0.0, epsrel=1e-12, limit=500)
    return val


def thm_8_5(epsilon: float, ell: int, log_p: float, profile, js: np.ndarray | None = None) -> float:  # noqa: ANN001
    """max(1 − p^l, max_j[1 − p^{l−j} + p^{l−j}δ_j(ε − γ_j)], max_j δ_j(ε + γ_j)), γ_j = (l − j)ln p."""
    j = np.arange(1, ell + 1) if js is None else np.asarray(js)
    gamma = (ell - j) * log_p
    p_rest = np.exp(gamma)
    term1 = 1.0 - math.exp(ell * log_p)
    term2 = (1.0 - p_rest) + p_rest * profile(j, epsilon - gamma)
    term3 = profile(j, epsilon + gamma)
    return max(term1, float(np.max(term2)), float(np.max(term3)))


def continuous_oracle(epsilon: float, sigma: float, tau: float, ell: int) -> float:
    log_p = float(stats.norm.logcdf(tau / sigma))
    return thm_8_5(epsilon, ell, log_p, lambda j, e: bw_profile(j, e, sigma))


# ---- discrete Gaussian (direct pmf sums) ------------------------------------------------------------


@lru_cache(maxsize=8)
def dg_weights(var: float) -> tuple[int, np.ndarray, float]:
    """Unnormalised pmf exp(−s²/(2 var)) on [−R, R], R = 40√var + 10, and its direct (pairwise, all terms >= 0) sum."""
    radius = int(40 * math.sqrt(var)) + 10
    s = np.arange(-radius, radius + 1, dtype=float)
    w = np.exp(-(s * s) / (2 * var))
    return radius, w, float(np.sum(w))


def dg_tail(m: int, sigma2: float) -> float:
    """Pr[Y >= m], Y ~ N_Z(0, σ²)."""
    radius, w, total = dg_weights(sigma2)
    idx = min(max(m + radius, 0), w.size)
    return float(np.sum(w[idx:])) / total


@cache
def dg_normaliser(var: float) -> float:
    """Σ_s exp(−s²/(2 var)) by a direct sum over |s| <= 40√var + 10 (the rest is < e^{-800})."""
    return dg_weights(var)[2]


@cache
def exact_discrete_profile_one(j: int, e: float, sigma2: float) -> float:
    """Exact δ_j(e) for an all-ones shift of j coordinates of N_Z(0, σ²)^j (module docstring)."""
    var = j * sigma2
    total = dg_normaliser(var)
    width = int(40 * math.sqrt(var)) + 10
    s0 = max(math.floor(sigma2 * e + j / 2) + 1, j - width)  # L(s) = (2s − j)/(2σ²) > e iff s >= s0
    # Pr_Q[S = s − j] is maximal at s = j and Gaussian-decaying away from it: past max(s0, j) + 12√var
    # the remaining terms are < e^{-72} of the first one.
    end = min(max(s0, j) + int(12 * math.sqrt(var)) + 10, j + width)
    if end < s0:
        return 0.0
    s = np.arange(s0, end + 1, dtype=float)
    q_shift = np.exp(-((s - j) ** 2) / (2 * var)) / total  # Pr_Q[S = s − j] = Pr_P[S = s]
    loss = (2 * s - j) / (2 * sigma2)
    return float(np.sum(q_shift * -np.expm1(e - loss)))


def exact_discrete_profile(j: np.ndarray, e: np.ndarray, sigma2: float) -> np.ndarray:
    j, e = np.broadcast_arrays(np.asarray(j), np.asarray(e, dtype=float))
    return np.array([exact_discrete_profile_one(int(a), float(b), sigma2) for a, b in zip(j, e, strict=True)])


def j_subset(ell: int, sigma2: float, epsilon: float, log_p: float) -> np.ndarray:
    """All j for l <= 64; for larger l, a log-spaced set plus the module's per-term maximisers."""
    if ell <= 64:
        return np.arange(1, ell + 1)
    j = np.arange(1, ell + 1)
    gamma = (ell - j) * log_p
    rho = j / (2 * sigma2)
    t2 = (1 - np.exp(gamma)) + np.exp(gamma) * zcdp_profile(rho, epsilon - gamma)
    t3 = zcdp_profile(rho, epsilon + gamma)
    picks = set(np.unique(np.geomspace(1, ell, 30).astype(int)).tolist())
    for t in (t2, t3):
        top = int(np.argmax(t)) + 1
        picks.update(range(max(1, top - 2), min(ell, top + 2) + 1))
    return np.array(sorted(picks))


def discrete_oracle(epsilon: float, sigma2: float, tau: int, ell: int) -> tuple[float, float, np.ndarray]:
    """(exact discrete condition over the checked j, ln p, checked j)."""
    log_p = math.log1p(-dg_tail(tau, sigma2))  # p = Pr[Y <= τ − 1]
    js = j_subset(ell, sigma2, epsilon, log_p)
    value = thm_8_5(epsilon, ell, log_p, lambda j, e: exact_discrete_profile(j, e, sigma2), js)
    return value, log_p, js


# ---- tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.7, 4.86, 36.3, 355.8])
def test_balle_wang_matches_quadrature_and_module(sigma: float) -> None:
    js = [1, 2, 7, 64, 1000]
    es = [-0.3, 0.0, 0.5, 2.0, 6.0]
    for j in js:
        for e in es:
            oracle = integrated_profile(j, e, sigma)
            if oracle < 1e-250:
                continue
            assert float(bw_profile(j, e, sigma)) == pytest.approx(oracle, rel=REL)
            assert float(gaussian_profile(np.array([j]), np.array([e]), sigma)[0]) == pytest.approx(
                oracle, rel=REL
            )


@pytest.mark.parametrize(("sigma2", "j"), [(23.61, 4), (23.61, 64), (4.0, 8)])
def test_sum_of_discrete_gaussians_is_discrete_gaussian(sigma2: float, j: int) -> None:
    radius, w, total = dg_weights(sigma2)
    pmf = w / total
    acc, power, n = np.array([1.0]), pmf, j  # j-fold convolution by squaring (direct, non-negative sums)
    while n:
        if n & 1:
            acc = np.convolve(acc, power)
        power = np.convolve(power, power)
        n >>= 1
    r_sum, w_sum, t_sum = dg_weights(j * sigma2)
    direct = acc[j * radius - r_sum : j * radius + r_sum + 1]
    target = w_sum / t_sum
    mask = target > 1e-200
    np.testing.assert_allclose(direct[mask], target[mask], rtol=1e-9)


@pytest.mark.parametrize(("eps", "delta", "k"), GRID)
def test_calibration_against_independent_oracle(eps: float, delta: float, k: int) -> None:
    params = calibrate_gshm(eps, delta, k)
    s2, tau = float(params.sigma2), params.tau
    sigma = math.sqrt(s2)

    # (a) continuous Thm 8.5 (exact "iff" for Gaussian noise): module == scipy oracle, and <= δ
    cont = continuous_oracle(eps, sigma, tau, k)
    assert gshm_delta_continuous(eps, sigma, tau, k) == pytest.approx(cont, rel=REL)
    assert cont <= delta

    # (b) discrete Gaussian actually sampled: p by direct pmf sum; exact δ_j vs the module's CKS bound
    module_disc = gshm_delta_discrete(eps, s2, tau, k)
    exact_disc, log_p, js = discrete_oracle(eps, s2, tau, k)
    assert module_disc <= delta
    assert exact_disc <= delta
    # the threshold term 1 − p^l is the same quantity in both (rel 1e-6); the δ_j terms are bounds
    assert exact_disc <= module_disc * (1 + REL)
    gamma = (k - js) * log_p
    rho = js / (2 * s2)
    for e in (eps - gamma, eps + gamma):
        exact_j = exact_discrete_profile(js, e, s2)
        assert np.all(zcdp_profile(rho, e) >= exact_j * (1 - 1e-12))  # the module's bound dominates
    # the threshold term 1 − p^l never exceeds the module's condition (same p, rel 1e-6)
    assert -math.expm1(k * log_p) <= module_disc * (1 + REL)

    # power: the same oracle rejects σ reduced by 10 % (same τ)
    s2_low = 0.81 * s2
    assert continuous_oracle(eps, 0.9 * sigma, tau, k) > delta
    assert discrete_oracle(eps, s2_low, tau, k)[0] > delta


@pytest.mark.parametrize(("eps", "delta", "k"), [(1.0, 1e-6, 64), (0.5, 1e-9, 1000)])
def test_discrete_tail_matches_module_p(eps: float, delta: float, k: int) -> None:
    """The drop probability p the module uses equals the oracle's direct pmf sum."""
    from privstream.noise.distributions import discrete_gaussian_tail

    params = calibrate_gshm(eps, delta, k)
    s2 = float(params.sigma2)
    for m in (0, 1, params.tau - 1, params.tau, params.tau + 5):
        assert discrete_gaussian_tail(m, s2) == pytest.approx(dg_tail(m, s2), rel=REL)
