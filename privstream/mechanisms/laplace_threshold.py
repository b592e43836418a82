"""Thresholded Laplace(k/ε) release of merged (or any one-signed, support-≤k) MG sketches
(Lebeda–Tětek §7, second "trusted aggregator, ≤ 2k counters" option; Chan et al. with a threshold).

Mechanism: Z_x ~ discrete Laplace(k/ε) (exact, two-sided geometric) added to every stored non-zero
count; keep noisy values >= T.

**Threshold derivation** (the Lebeda–Tětek §8 construction, derived here and tightened). Neighbours differ on
≤ k counters, each by exactly 1, one-signed, with nested key sets (Cor. 7.2 / Lemma 8.9). Let the
larger sketch have n >= 0 keys absent from the smaller (count exactly 1) and j shared keys with
count +1, n + j <= k. Let q = Pr[1 + Z >= T] = Pr[Z >= T − 1] (the chance one new key is kept) and
S_0 the outputs in S without a new key.

* larger → smaller: Pr[big ∈ S] <= Pr[some new key kept] + Pr[shared(big) ∈ S_0]
  <= n·q + e^{εj/k}·Pr[small ∈ S]  (ℓ1 distance j on the shared keys, noise scale k/ε).
* smaller → larger: Pr[shared(big) ∈ S_0] <= Pr[big ∈ S] + (1 − (1−q)^n), so
  Pr[small ∈ S] <= e^{εj/k}·(Pr[big ∈ S] + n·q) <= e^ε·Pr[big ∈ S] + e^{ε(k−n)/k}·n·q.

Hence (ε, δ)-DP when δ >= q·max(k, max_{1<=n<=k} n·e^{ε(1−n/k)}) =: q·C(ε, k). The commonly quoted (unverified)
(1+e^ε)·(k/2)·e^{−εt/k} <= δ is (1+e^ε)·k·Pr[Lap >= t]; since C(ε, k) <= e^ε·k < (1+e^ε)·k it is valid
but looser. We use the smallest integer T with q·C(ε, k) <= δ, Pr[Z >= m] = α^m/(1+α), α = e^{−ε/k}.
"""

from __future__ import annotations

import math

from privstream.mechanisms.common import (
    add_laplace,
    check_delta,
    check_epsilon,
    laplace_scale,
    threshold_and_sort,
)
from privstream.mechanisms.registry import ONE_SIGNED_K, Calibration, Mechanism, PrivacyMap, Request
from privstream.mechanisms.release_types import ErrorBound
from privstream.noise.distributions import (
    discrete_laplace_abs_tail,
    discrete_laplace_tail,
    smallest_abs_bound,
    smallest_satisfying,
)
from privstream.noise.rng import RandomSource
from privstream.sketches import Key
from privstream.validation import check_int


def new_key_factor(epsilon: float, k: int) -> float:
    """C(ε, k) = max(k, max_{1<=n<=k} n·e^{ε(1−n/k)}); the maximiser is n ≈ k/ε."""
    eps = check_epsilon(epsilon)
    candidates = {1, k, max(1, min(k, math.floor(k / eps))), max(1, min(k, math.ceil(k / eps)))}
    return max(float(k), *(n * math.exp(eps * (1 - n / k)) for n in candidates))


def laplace_threshold_delta(epsilon: float, k: int, threshold: int) -> float:
    """δ of thresholded Laplace(k/ε) with inclusive threshold ``threshold`` (module docstring)."""
    return discrete_laplace_tail(threshold - 1, k / check_epsilon(epsilon)) * new_key_factor(epsilon, k)


def laplace_threshold(epsilon: float, delta: float, k: int) -> int:
    """Smallest integer T >= 2 with Pr[Z >= T−1]·C(ε, k) <= δ."""
    eps, dlt = check_epsilon(epsilon), check_delta(delta)
    check_int("k", k, type_error=ValueError)
    guess = 1 + math.ceil((k / eps) * math.log(new_key_factor(eps, k) / dlt))
    return smallest_satisfying(lambda t: laplace_threshold_delta(eps, k, t) <= dlt, 2, guess)


def laplace_threshold_release(
    counts: dict[Key, int], epsilon: float, threshold: int, k: int, rng: RandomSource
) -> tuple[tuple[Key, int], ...]:
    nonzero = [(x, c) for x, c in counts.items() if c != 0]
    return threshold_and_sort(add_laplace(nonzero, laplace_scale(k, epsilon), rng), threshold)


def laplace_threshold_error_bound(
    epsilon: float, threshold: int, k: int, beta: float, sketch_term: str
) -> ErrorBound:
    b = smallest_abs_bound(lambda m: discrete_laplace_abs_tail(m, k / epsilon), k, beta)
    return ErrorBound(
        below=float(threshold - 1 + b),
        above=float(b),
        beta=beta,
        sketch_term=sketch_term,
        derivation=f"k·Pr[|Z|>b]<=beta with b={b}; unreleased stored keys have c <= T-1+b, T={threshold}",
    )


# ---- the registered mechanism ----------------------------------------------------------------------


def _calibrate(request: Request) -> Calibration:
    eps, k = request.budget.epsilon, request.k
    thr = laplace_threshold(eps, request.budget.delta, k)
    return Calibration(
        laplace_threshold_error_bound(eps, thr, k, request.beta, request.sketch_term),
        (("threshold", thr), ("scale", f"{k}/eps")),
        thr,
    )


def _sample(counters: dict[Key, int], request: Request, calibration: Calibration, rng: RandomSource) -> tuple:
    return laplace_threshold_release(counters, request.budget.epsilon, calibration.noise, request.k, rng)


MECHANISM = Mechanism(
    name="laplace_threshold",
    title="thresholded Laplace(k/ε)",
    structure=ONE_SIGNED_K,
    calibrate=_calibrate,
    sample=_sample,
    privacy=PrivacyMap(
        pure=False,
        theorem="Lebeda-Tetek §7 (trusted aggregator, <= 2k counters): delta = Pr[Z >= T-1]·C(ε, k) for "
        "one-signed changes of 1 on <= k keys with nested key sets (privstream.mechanisms.laplace_threshold)",
    ),
)
