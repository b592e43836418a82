"""One entry point for private releases of sketches: :func:`release` (and
:func:`release_partitions` for the per-partition Alg. 3 route).

Which mechanisms a sketch admits follows from its :class:`~privstream.sketches.Build` (Lebeda–Tětek):

=====================  ==============================================================  =========
mechanism              valid for                                                       needs
=====================  ==============================================================  =========
``pmg``                ALG1_SEQUENTIAL only (Alg. 2, §5.2 threshold)                   δ > 0
``pmg_standard``       ALG1_SEQUENTIAL, STANDARD_SEQUENTIAL (§5.1 threshold)           δ > 0
``gshm``               every MG build (one-signed, ≤ k differences: Lemma 2, Cor. 7.2,  δ > 0
                       Lemma 8.9 / Cor. 8.10), l = k (Thm 8.5, Thm 8.12 for PAMG)
``laplace_threshold``  every MG build (thresholded Laplace(k/ε))                       δ > 0
``pure_topk``          ALG1_SEQUENTIAL, STANDARD_SEQUENTIAL (Alg. 3 + Laplace(2/ε), §6) domain
``chan_topk``          every MG build (Laplace(k/ε) on the universe, top k)            domain
``chan_pmg``           every MG build (Geom(exp(ε/k)), clamp at 0, top k non-zero)      domain
=====================  ==============================================================  =========

PMG on a merged sketch is refused (§7: "we cannot run Algorithm 2 on the merged sketch"), as is any
user-level (PAMG) release without a positive bound m. ``mechanism="auto"`` considers every valid
mechanism for the budget (and the domain, if given) and picks the smallest worst-case noise error
``max(below, above)`` of its :class:`ErrorBound`.

If a :class:`~privstream.accounting.PrivacyLedger` is passed, the release is charged (and persisted
by the ledger's hook) after validation and *before* any noise is drawn; over-budget requests raise
:class:`~privstream.accounting.BudgetExceeded` and release nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from privstream.accounting import Budget, PrivacyLedger
from privstream.mechanisms.domain_releases import (
    chan_error_bound,
    chan_values,
    pure_topk_error_bound,
    pure_topk_values,
)
from privstream.mechanisms.domain_topk import Domain
from privstream.mechanisms.gshm import calibrate_gshm, gshm_error_bound, gshm_release
from privstream.mechanisms.laplace_threshold import (
    laplace_threshold,
    laplace_threshold_error_bound,
    laplace_threshold_release,
)
from privstream.mechanisms.pmg import pmg_error_bound, pmg_release, pmg_standard_threshold, pmg_threshold
from privstream.mechanisms.release_types import ErrorBound, MechanismNotApplicable, Release
from privstream.noise.rng import RandomSource, resolve
from privstream.sketches import Build, reduce_sensitivity, sum_reduced

MECHANISMS = ("pmg", "pmg_standard", "gshm", "laplace_threshold", "pure_topk", "chan_topk", "chan_pmg")
_SEQUENTIAL = (Build.ALG1_SEQUENTIAL, Build.STANDARD_SEQUENTIAL)
_USER_LEVEL = (Build.PAMG, Build.PAMG_MERGED)


@dataclass(frozen=True)
class _Plan:
    """A validated, calibrated mechanism: its error bound and a sampler for the items."""

    name: str
    error_bound: ErrorBound
    parameters: tuple[tuple[str, Any], ...]
    sample: Callable[[RandomSource], tuple]


def _sketch_facts(sketch: object) -> tuple[Build, int]:
    build = getattr(sketch, "build", None)
    k = getattr(sketch, "k", None)
    if (
        not isinstance(build, Build)
        or not isinstance(k, int)
        or not callable(getattr(sketch, "counters", None))
    ):
        raise TypeError(f"sketch must be a privstream Misra-Gries-type sketch, got {type(sketch).__name__}")
    if build in _USER_LEVEL:
        m = getattr(sketch, "m", None)
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise MechanismNotApplicable(
                "user-level release needs a bound m on each user's distinct items recorded on the sketch "
                f"(PAMG, Lebeda-Tetek §8); got m={m!r}"
            )
    return build, k


def _sketch_term(build: Build) -> str:
    if build in _USER_LEVEL:
        return "M/(k+1) (Lemma 8.8 / 8.11, M = total items over all users)"
    if build is Build.MERGED:
        return "N/(k+1) (Agarwal et al. merge, N = total stream length)"
    return "n/(k+1) (Fact 1)"


def _plan(name: str, sketch: object, budget: Budget, domain: Domain | None, beta: float) -> _Plan:
    build, k = _sketch_facts(sketch)
    eps, delta = budget.epsilon, budget.delta
    if eps <= 0:
        raise MechanismNotApplicable("budget.epsilon must be > 0 for a release")
    if name in ("pmg", "pmg_standard", "gshm", "laplace_threshold") and delta <= 0:
        raise MechanismNotApplicable(
            f"{name} is (ε, δ)-DP and needs delta > 0; use pure_topk/chan_* with a domain"
        )
    if name in ("pure_topk", "chan_topk", "chan_pmg") and domain is None:
        raise MechanismNotApplicable(
            f"{name} adds noise to every element of a declared universe: pass domain="
        )
    term = _sketch_term(build)
    if name == "pmg":
        if build is not Build.ALG1_SEQUENTIAL:
            raise MechanismNotApplicable(
                f"pmg (Lebeda-Tetek Alg. 2) needs a sequentially built Alg. 1 sketch; this one is {build.name} "
                "(§7: PMG must not be applied to merged sketches; use gshm or laplace_threshold)"
            )
        thr = pmg_threshold(eps, delta)
        return _Plan(
            name,
            pmg_error_bound(eps, thr, k, beta),
            (("threshold", thr), ("noise", "two-sided geometric, scale 1/eps, shared + per-slot")),
            lambda rng: pmg_release(sketch.slots(), eps, thr, rng),  # type: ignore[attr-defined]
        )
    if name == "pmg_standard":
        if build not in _SEQUENTIAL:
            raise MechanismNotApplicable(
                f"pmg_standard (§5.1) needs a sequentially built MG sketch; this one is {build.name}"
            )
        thr = pmg_standard_threshold(eps, delta, k)
        return _Plan(
            name,
            pmg_error_bound(eps, thr, k, beta),
            (("threshold", thr), ("noise", "two-sided geometric, scale 1/eps, shared + per-key")),
            lambda rng: pmg_release(list(sketch.counters().items()), eps, thr, rng),  # type: ignore[attr-defined]
        )
    if name == "gshm":
        params = calibrate_gshm(eps, delta, k, beta)
        return _Plan(
            name,
            gshm_error_bound(params, term),
            (("sigma2", params.sigma2), ("tau", params.tau), ("threshold", params.threshold), ("l", k)),
            lambda rng: gshm_release(sketch.counters(), params, rng),  # type: ignore[attr-defined]
        )
    if name == "laplace_threshold":
        thr = laplace_threshold(eps, delta, k)
        return _Plan(
            name,
            laplace_threshold_error_bound(eps, thr, k, beta, term),
            (("threshold", thr), ("scale", f"{k}/eps")),
            lambda rng: laplace_threshold_release(sketch.counters(), eps, thr, k, rng),  # type: ignore[attr-defined]
        )
    if name == "pure_topk":
        if build not in _SEQUENTIAL:
            raise MechanismNotApplicable(
                f"pure_topk applies Alg. 3, whose ℓ1 < 2 bound (Lemma 6.2) needs a sequentially built MG sketch; "
                f"this one is {build.name} (for partitions use release_partitions)"
            )
        reduced = reduce_sensitivity(sketch)  # type: ignore[arg-type]
        return _reduced_plan(reduced, eps, k, domain, beta)  # type: ignore[arg-type]
    if name in ("chan_topk", "chan_pmg"):
        clamp = name == "chan_pmg"
        return _Plan(
            name,
            chan_error_bound(eps, k, domain, beta, term),  # type: ignore[arg-type]
            (("scale", f"{k}/eps"), ("clamp_at_zero", clamp), ("k", k)),
            lambda rng: chan_values(sketch.counters(), eps, k, k, domain, rng, clamp=clamp),  # type: ignore[arg-type, attr-defined]
        )
    raise ValueError(f"mechanism must be 'auto' or one of {MECHANISMS}, got {name!r}")


def _reduced_plan(reduced: Any, eps: float, k: int, domain: Domain, beta: float) -> _Plan:
    den = reduced.denominator
    return _Plan(
        "pure_topk",
        pure_topk_error_bound(eps, den, domain, beta),
        (("scale", f"2/eps on the 1/{den} lattice"), ("k", k), ("partitions", reduced.partitions)),
        lambda rng: pure_topk_values(reduced.numerators, den, eps, k, domain, rng),
    )


def _finish(
    plan: _Plan,
    build: Build,
    budget: Budget,
    rng: RandomSource | None,
    epoch: int | None,
    ledger: PrivacyLedger | None,
    label: str,
) -> Release:
    pure = plan.name in ("pure_topk", "chan_topk", "chan_pmg")
    charged = Budget(budget.epsilon, 0.0 if pure else budget.delta)
    if ledger is not None:
        ledger.charge(charged, mechanism=plan.name, epoch=epoch, label=label)
    items = plan.sample(resolve(rng))
    g = build.guarantees
    return Release(
        items=tuple(items),
        epsilon=charged.epsilon,
        delta=charged.delta,
        mechanism=plan.name,
        neighbour_relation=g.neighbour_relation,
        privacy_unit=g.privacy_unit,
        error_bound=plan.error_bound,
        epoch=epoch,
        parameters=plan.parameters,
    )


def _check_request(budget: Budget, beta: float) -> None:
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be an accounting.Budget, not {type(budget).__name__}")
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 < beta < 1:
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}")


def applicable_mechanisms(sketch: object, budget: Budget, *, domain: Domain | None = None) -> dict[str, str]:
    """Every mechanism name -> "" if valid for this sketch/budget/domain, else the reason it is not."""
    out = {}
    for name in MECHANISMS:
        try:
            _plan(name, sketch, budget, domain, 0.05)
            out[name] = ""
        except MechanismNotApplicable as exc:
            out[name] = str(exc)
    return out


def release(
    sketch: object,
    budget: Budget,
    *,
    mechanism: str = "auto",
    rng: RandomSource | None = None,
    epoch: int | None = None,
    domain: Domain | None = None,
    beta: float = 0.05,
    ledger: PrivacyLedger | None = None,
    label: str = "",
) -> Release:
    """Privately release ``sketch`` under ``budget``.

    ``mechanism``: "auto" or one of :data:`MECHANISMS`; ``domain``: the declared universe (a
    ``range`` or a sequence of items) for the domain-wide mechanisms; ``beta``: confidence of the
    reported error bound; ``ledger``: charged before noise is drawn. Raises
    :class:`MechanismNotApplicable` when the sketch does not meet the mechanism's assumptions.
    """
    _check_request(budget, beta)
    build, _ = _sketch_facts(sketch)
    if mechanism == "auto":
        plans = []
        reasons = []
        for name in MECHANISMS:
            try:
                plans.append(_plan(name, sketch, budget, domain, beta))
            except MechanismNotApplicable as exc:
                reasons.append(f"{name}: {exc}")
        if not plans:
            raise MechanismNotApplicable("no mechanism applies: " + "; ".join(reasons))
        plan = min(plans, key=lambda p: p.error_bound.max_noise_error)
    else:
        plan = _plan(mechanism, sketch, budget, domain, beta)
    return _finish(plan, build, budget, rng, epoch, ledger, label)


def release_partitions(
    sketches: Sequence[object],
    budget: Budget,
    *,
    domain: Domain,
    rng: RandomSource | None = None,
    epoch: int | None = None,
    beta: float = 0.05,
    ledger: PrivacyLedger | None = None,
    label: str = "",
) -> Release:
    """§7 trusted aggregator, optimal error: Alg. 3 on each partition sketch, key-wise sum, then
    Laplace(2/ε) on the universe + top-k (ε-DP; only one partition changes between neighbours)."""
    _check_request(budget, beta)
    if not sketches:
        raise ValueError("sketches must not be empty")
    builds = set()
    for s in sketches:
        build, _ = _sketch_facts(s)
        if build not in _SEQUENTIAL:
            raise MechanismNotApplicable(
                f"release_partitions needs sequentially built partition sketches, got {build.name}"
            )
        builds.add(build)
    reduced = sum_reduced([reduce_sensitivity(s) for s in sketches])  # type: ignore[arg-type]
    plan = _reduced_plan(reduced, budget.epsilon, reduced.k, domain, beta)
    return _finish(plan, builds.pop(), budget, rng, epoch, ledger, label)
