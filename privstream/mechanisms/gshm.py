"""Gaussian Sparse Histogram Mechanism (Lebeda–Tětek Thm 8.5, after Wilkins–Kifer–Zhang–Karrer
Thm 5.4) for merged MG sketches (l = k, Cor. 7.2) and merged PAMG sketches (Thm 8.12).

GSHM(T, c, l, σ, τ): add N(0, σ²) to every non-zero count, keep noisy counts >= 1 + τ.

**Exact condition (Thm 8.5).** With p = Pr[a count-1 key is *not* kept] (= Φ(τ/σ)), γ_j = (l−j)·ln p
and δ_j(·) the privacy profile of adding the noise to j coordinates shifted by 1,

    δ >= max( 1 − p^l,
              max_j [1 − p^{l−j} + p^{l−j}·δ_j(ε − γ_j)],
              max_j δ_j(ε + γ_j) ).

For the continuous Gaussian δ_j(e) = Φ(√j/(2σ) − eσ/√j) − e^e·Φ(−√j/(2σ) − eσ/√j) (Balle–Wang),
which is :func:`gshm_delta_continuous`, i.e. the paper's condition verbatim.

**Discrete Gaussian (what privstream samples).** The three terms come from a generic argument that
holds for any independent, symmetric per-key noise: l − j keys present only in the larger sketch
(count 1) are all dropped with probability p^{l−j}, independently of the j shared keys whose
counts differ by 1; post-processing (the threshold on shared keys) cannot increase δ_j. (Both
terms are also monotone in the number of new keys, so "exactly l − j new keys" is the worst case.)
We therefore use, conservatively:

* p = Pr[Y <= τ − 1] for Y ~ N_Z(0, σ²) (a count-1 key is kept iff 1 + Y >= 1 + τ), computed by
  summing the discrete Gaussian pmf (:func:`privstream.noise.distributions.discrete_gaussian_tail`);
* δ_j(e) <= the Canonne–Kamath–Steinke conversion of the Rényi bound: the discrete Gaussian with an
  integer shift of ℓ2 norm √j satisfies D_α <= α·j/(2σ²) (CKS 2020, Rényi divergence of discrete
  Gaussians), i.e. ρ_j = j/(2σ²)-zCDP, and ρ-zCDP gives, for every α > 1,
  δ(e) <= exp((α−1)(αρ − e))/(α − 1) · (1 − 1/α)^α (CKS 2020, Cor. 13 of the arXiv version; any α
  gives a valid bound, we bisect for a good one). For e < 0 we use δ(e) <= 1 − e^e + δ(0).

This is an upper bound on the exact discrete δ, so the stated (ε, δ) is valid for the sampled noise;
it costs a few percent more σ than the continuous exact condition. :func:`gshm_delta_continuous`
and :func:`lemma_8_6_parameters` are exposed for comparison (Lemma 8.6 is loose and needs ε < 1).

The paper's l (the number of counts that may differ) is spelled ``ell`` in code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from privstream.mechanisms.common import add_gaussian, check_delta, check_epsilon, threshold_and_sort
from privstream.mechanisms.registry import ONE_SIGNED_K, Calibration, Mechanism, PrivacyMap, Request
from privstream.mechanisms.release_types import ErrorBound
from privstream.noise.distributions import (
    discrete_gaussian_abs_tail,
    discrete_gaussian_tail,
    smallest_abs_bound,
    smallest_satisfying,
)
from privstream.noise.rng import RandomSource
from privstream.sketches import Key
from privstream.validation import check_int

_erfc = np.vectorize(math.erfc, otypes=[float])


def _phi(x: np.ndarray) -> np.ndarray:
    return 0.5 * _erfc(-np.asarray(x, dtype=float) / math.sqrt(2.0))


def gaussian_profile(j: np.ndarray, eps: np.ndarray, sigma: float) -> np.ndarray:
    """Exact δ(eps) of the continuous Gaussian mechanism with ℓ2 sensitivity √j (Balle–Wang)."""
    root = np.sqrt(np.asarray(j, dtype=float))
    e = np.asarray(eps, dtype=float)
    out = _phi(root / (2 * sigma) - e * sigma / root) - np.exp(e) * _phi(
        -root / (2 * sigma) - e * sigma / root
    )
    return np.clip(out, 0.0, 1.0)


def zcdp_profile(rho: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """CKS 2020 bound on δ(eps) for a ρ-zCDP pair, eps >= 0: min over α of
    exp((α−1)(αρ−eps) + α·ln(1−1/α))/(α−1); for eps < 0: 1 − e^eps + δ(0)."""
    rho = np.asarray(rho, dtype=float)
    eps = np.asarray(eps, dtype=float)
    rho, eps = np.broadcast_arrays(rho, eps)
    e0 = np.maximum(eps, 0.0)
    lo = np.full(rho.shape, 1.01)
    hi = (e0 + 1) / (2 * rho) + 2
    for _ in range(100):  # bisect the stationarity condition (2α−1)ρ − e + ln(1 − 1/α) = 0
        mid = (lo + hi) / 2
        neg = (2 * mid - 1) * rho - e0 + np.log1p(-1.0 / mid) < 0
        new_lo = np.where(neg, mid, lo)
        new_hi = np.where(neg, hi, mid)
        if np.array_equal(new_lo, lo) and np.array_equal(new_hi, hi):
            break  # a fixed point in floating point: further steps cannot change (lo, hi)
        lo, hi = new_lo, new_hi
    alpha = (lo + hi) / 2
    with np.errstate(over="ignore"):
        bound = np.exp((alpha - 1) * (alpha * rho - e0) + alpha * np.log1p(-1.0 / alpha)) / (alpha - 1)
    bound = np.minimum(bound, 1.0)
    return np.where(eps >= 0, bound, np.minimum(1.0, 1.0 - np.exp(eps) + bound))


def _condition(epsilon: float, ell: int, log_p: float, profile, above: float = math.inf) -> float:  # noqa: ANN001
    """Right-hand side of the Thm 8.5 condition for the given ln p and profile δ_j(e). The terms
    are computed cheapest first; once one exceeds ``above`` it is returned (a value > ``above``, so
    ``_condition(...) <= above`` is decided exactly, without the other profile evaluations)."""
    term1 = -math.expm1(ell * log_p)
    if term1 > above:
        return term1
    j = np.arange(1, ell + 1, dtype=float)
    gamma = (ell - j) * log_p
    term3 = float(profile(j, epsilon + gamma).max())
    if term3 > above:
        return term3
    p_rest = np.exp(gamma)
    term2 = float(((1 - p_rest) + p_rest * profile(j, epsilon - gamma)).max())
    return max(term1, term2, term3)


def gshm_delta_continuous(epsilon: float, sigma: float, tau: float, ell: int) -> float:
    """The smallest δ for which GSHM(σ, τ, l) with continuous Gaussian noise is (ε, δ)-DP (Thm 8.5)."""
    log_p = math.log1p(-0.5 * math.erfc(tau / (sigma * math.sqrt(2.0))))
    return _condition(epsilon, ell, log_p, lambda j, e: gaussian_profile(j, e, sigma))


def gshm_delta_discrete(epsilon: float, sigma2: float, tau: int, ell: int, above: float = math.inf) -> float:
    """A valid δ for GSHM with discrete Gaussian N_Z(0, σ²) noise (module docstring); with
    ``above``, a value > ``above`` as soon as the δ is known to exceed it (:func:`_condition`)."""
    log_p = _log_p(tau, sigma2)
    return _condition(epsilon, ell, log_p, lambda j, e: zcdp_profile(j / (2.0 * float(sigma2)), e), above)


def _log_p(tau: int, sigma2: float) -> float:
    """ln p, p = Pr[Y <= τ − 1] for Y ~ N_Z(0, σ²): a count-1 key is dropped."""
    return math.log1p(-discrete_gaussian_tail(int(tau), float(sigma2)))


def lemma_8_6_parameters(epsilon: float, delta: float, ell: int) -> tuple[float, float]:
    """Lemma 8.6 (ε < 1): σ = √(2l·ln(2.5/δ))/ε, τ = √(2·ln(2l/δ))·σ."""
    eps, dlt = check_epsilon(epsilon), check_delta(delta)
    if eps >= 1:
        raise ValueError(f"epsilon: Lemma 8.6 needs epsilon < 1, got {eps}")
    sigma = math.sqrt(2 * ell * math.log(2.5 / dlt)) / eps
    return sigma, math.sqrt(2 * math.log(2 * ell / dlt)) * sigma


def smallest_tau_continuous(
    epsilon: float, delta: float, ell: int, sigma: float, rel_tol: float = 1e-9
) -> float:
    """Smallest τ (to rel_tol, rounded up) satisfying Thm 8.5 exactly for continuous noise; inf if
    no τ works for this σ (the Gaussian part alone exceeds δ)."""
    if gshm_delta_continuous(epsilon, sigma, 60 * sigma, ell) > delta:
        return math.inf
    lo, hi = 0.0, 60 * sigma
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        if gshm_delta_continuous(epsilon, sigma, mid, ell) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def _tau_top(sigma2: float) -> int:
    """A τ beyond which the threshold term no longer matters (Pr[Y >= τ] underflows)."""
    return int(45 * math.sqrt(sigma2)) + 10


def gshm_feasible(epsilon: float, delta: float, ell: int, sigma2: float) -> bool:
    """Whether some τ satisfies the discrete condition for this σ² (the Gaussian part fits in δ)."""
    return gshm_delta_discrete(epsilon, sigma2, _tau_top(sigma2), ell, above=delta) <= delta


def smallest_tau_discrete(epsilon: float, delta: float, ell: int, sigma2: float) -> int | None:
    """Smallest integer τ satisfying the discrete condition; None if no τ works for this σ².

    The search starts at the smallest τ whose threshold term 1 − p^l alone fits in δ (a scalar
    computation; no smaller τ can satisfy the condition, the term falling with τ), which is the
    answer or close to it when the Gaussian part is well inside δ."""
    if not gshm_feasible(epsilon, delta, ell, sigma2):
        return None
    first = smallest_satisfying(lambda tau: -math.expm1(ell * _log_p(tau, sigma2)) <= delta, 0)
    return smallest_satisfying(
        lambda tau: gshm_delta_discrete(epsilon, sigma2, tau, ell, above=delta) <= delta, first
    )


@dataclass(frozen=True)
class GSHMParameters:
    """Calibrated discrete GSHM: noise N_Z(0, sigma2), keep noisy counts >= 1 + tau."""

    sigma2: Fraction
    tau: int
    ell: int
    epsilon: float
    delta: float
    noise_bound: int  # b with k·Pr[|Y| > b] <= beta
    beta: float

    @property
    def threshold(self) -> int:
        return 1 + self.tau

    @property
    def objective(self) -> int:
        return self.tau + self.noise_bound


@lru_cache(maxsize=128)
def calibrate_gshm(epsilon: float, delta: float, ell: int, beta: float = 0.05) -> GSHMParameters:
    """Choose σ² (a rational with denominator 100) minimising the error bound τ + b, with τ the
    smallest integer satisfying the (discrete, conservative) Thm 8.5 condition for that σ²."""
    eps, dlt = check_epsilon(epsilon), check_delta(delta)
    check_int("ell", ell, type_error=ValueError)

    def rounded(sigma: float) -> Fraction:
        return Fraction(math.ceil(sigma * sigma * 100), 100)

    def evaluate(sigma: float) -> GSHMParameters | None:
        s2 = rounded(sigma)
        tau = smallest_tau_discrete(eps, dlt, ell, float(s2))
        if tau is None:
            return None
        b = smallest_abs_bound(lambda m: discrete_gaussian_abs_tail(m, float(s2)), ell, beta)
        return GSHMParameters(s2, tau, ell, eps, dlt, b, beta)

    def infeasible(sigma: float) -> bool:
        return not gshm_feasible(eps, dlt, ell, float(rounded(sigma)))

    # Smallest feasible σ: bisect on feasibility (the Gaussian part alone must fit in δ).
    lo, hi = 0.05, max(1.0, math.sqrt(ell) / eps)
    while infeasible(hi):
        lo, hi = hi, hi * 2
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        if infeasible(mid):
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.002:
            break
    best = evaluate(hi)
    assert best is not None
    sigma = hi
    for factor in (1.1, 1.02):  # coarse then fine scan upward while the objective improves
        while True:
            cand = evaluate(sigma * factor)
            if cand is None or cand.objective > best.objective:
                break
            best, sigma = cand, sigma * factor
    return best


def gshm_release(
    counts: dict[Key, int] | list[tuple[Key, int]], params: GSHMParameters, rng: RandomSource
) -> tuple[tuple[Key, int], ...]:
    """Thm 8.5 mechanism: discrete Gaussian on every non-zero count, keep noisy >= 1 + τ."""
    items = counts.items() if isinstance(counts, dict) else counts
    nonzero = [(x, c) for x, c in items if c != 0]
    return threshold_and_sort(add_gaussian(nonzero, params.sigma2, rng), params.threshold)


def gshm_error_bound(params: GSHMParameters, sketch_term: str) -> ErrorBound:
    """All ≤ k noises lie in [−b, b] w.p. >= 1−β; an unreleased key has c + Y <= τ, so c <= τ + b
    (Thm 8.12's f̂ ∈ [f − M/(k+1) − 2τ − 1, f + τ] is the same argument with b = τ and β = 2δ)."""
    b = params.noise_bound
    return ErrorBound(
        below=float(params.tau + b),
        above=float(b),
        beta=params.beta,
        sketch_term=sketch_term,
        derivation=f"Lebeda-Tetek Thm 8.12 style: b={b} with ell·Pr[|Y|>b]<=beta, tau={params.tau}",
    )


# ---- the registered mechanism ----------------------------------------------------------------------


def _calibrate(request: Request) -> Calibration:
    b = request.budget
    params = calibrate_gshm(b.epsilon, b.delta, request.k, request.beta)
    return Calibration(
        gshm_error_bound(params, request.sketch_term),
        (("sigma2", params.sigma2), ("tau", params.tau), ("threshold", params.threshold), ("l", request.k)),
        params,
    )


def _sample(counters: dict[Key, int], request: Request, calibration: Calibration, rng: RandomSource) -> tuple:
    return gshm_release(counters, calibration.noise, rng)


MECHANISM = Mechanism(
    name="gshm",
    title="Gaussian Sparse Histogram Mechanism, l = k",
    structure=ONE_SIGNED_K,
    calibrate=_calibrate,
    sample=_sample,
    privacy=PrivacyMap(
        pure=False,
        theorem="Lebeda-Tetek Thm 8.5 with l = k (Cor. 7.2, Lemma 8.9 / Cor. 8.10, Thm 8.12); discrete "
        "Gaussian profile bounded via Canonne-Kamath-Steinke 2020",
    ),
)
