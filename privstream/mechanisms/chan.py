"""Chan et al.'s domain-wide releases of an MG sketch, shared by ``chan_topk`` and ``chan_pmg``.

* ``chan_topk`` — their baseline: Laplace(Δ/ε) on every element of the declared universe, top k
  (ε-DP), Δ = k;
* ``chan_pmg`` — their Alg. 1 (PMG): Geom(exp(ε/Δ)) on every counter, clamp at 0, keep the top k
  non-zero values, Δ = k + 1.

Δ = k bounds the ℓ1 distance of add/remove neighbours on every MG build (Lebeda–Tětek Lemma 2,
Cor. 7.2, Lemma 8.9); Δ = β + 1 = k + 1 is Chan et al.'s own calibration under their replace-one-
event relation (their Lemma 2), valid for both relations. Both use
:func:`privstream.mechanisms.domain_topk.noisy_top_k`, which samples only the noise values that can
reach the top k; its output law equals the naive one. Both release over the declared domain only:
stored keys outside it are dropped before noising.
"""

from __future__ import annotations

from collections.abc import Mapping

from privstream.mechanisms.common import laplace_scale
from privstream.mechanisms.domain_topk import DeclaredDomain, Domain, declared_domain, noisy_top_k
from privstream.mechanisms.pure_topk import DOMAIN_SCOPE
from privstream.mechanisms.registry import L1_K, Calibration, Mechanism, PrivacyMap, Request
from privstream.mechanisms.release_types import ErrorBound
from privstream.noise.distributions import discrete_laplace_abs_tail, smallest_abs_bound
from privstream.noise.rng import RandomSource
from privstream.sketches import Item


def chan_values(
    counts: Mapping[Item, int],
    epsilon: float,
    k: int,
    sensitivity: int,
    domain: Domain | DeclaredDomain,
    rng: RandomSource,
    *,
    clamp: bool,
) -> tuple[tuple[Item, int], ...]:
    """Chan et al.: Laplace/Geom(exp(ε/Δ)) on every element; top k (``clamp``: only values >= 1)."""
    scale = laplace_scale(sensitivity, epsilon)
    nonzero = {x: c for x, c in counts.items() if c != 0}
    return tuple(noisy_top_k(nonzero, domain, k, scale, rng, min_value=1 if clamp else None))


def chan_error_bound(
    epsilon: float, sensitivity: int, domain: Domain | DeclaredDomain, beta: float, sketch_term: str
) -> ErrorBound:
    """d·Pr[|Z| > b] <= β: released values within b of the counter; an unreleased key lost to a key
    with a larger noisy value (or was clamped), so its counter is <= 2b."""
    b = smallest_abs_bound(
        lambda m: discrete_laplace_abs_tail(m, sensitivity / epsilon), declared_domain(domain).size, beta
    )
    return ErrorBound(
        below=float(2 * b),
        above=float(b),
        beta=beta,
        sketch_term=sketch_term,
        derivation=f"Chan et al. top-k: d·Pr[|Z|>b]<=beta, b={b}, scale {sensitivity}/eps",
    )


def chan_mechanism(name: str, title: str, *, extra_sensitivity: int, clamp: bool, theorem: str) -> Mechanism:
    """A Chan et al. mechanism with Δ = k + ``extra_sensitivity`` (module docstring)."""

    def calibrate(request: Request) -> Calibration:
        assert request.domain is not None  # needs_domain: refused before calibration otherwise
        k = request.k
        sensitivity = k + extra_sensitivity
        return Calibration(
            chan_error_bound(
                request.budget.epsilon, sensitivity, request.domain, request.beta, request.sketch_term
            ),
            (("scale", f"{sensitivity}/eps"), ("clamp_at_zero", clamp), ("k", k), DOMAIN_SCOPE),
            sensitivity,
        )

    def sample(
        counts: dict[Item, int], request: Request, calibration: Calibration, rng: RandomSource
    ) -> tuple:
        eps, k, domain = request.budget.epsilon, request.k, request.domain
        return chan_values(counts, eps, k, calibration.noise, domain, rng, clamp=clamp)  # type: ignore[arg-type]

    return Mechanism(
        name=name,
        title=title,
        structure=L1_K,
        needs_domain=True,
        calibrate=calibrate,
        sample=sample,
        privacy=PrivacyMap(pure=True, theorem=theorem),
    )
