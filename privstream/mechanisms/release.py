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
``chan_pmg``           every MG build (Geom(exp(ε/(k+1))), clamp at 0, top k non-zero)  domain
=====================  ==============================================================  =========

PMG on a merged sketch is refused (§7: "we cannot run Algorithm 2 on the merged sketch"), as is any
user-level (PAMG) release without a positive bound m. ``mechanism="auto"`` considers every valid
mechanism for the budget (and the domain, if given) and picks the smallest worst-case noise error
``max(below, above)`` of its :class:`ErrorBound`.

If a :class:`~privstream.accounting.PrivacyLedger` is passed, the release is charged (and persisted
by the ledger's hook) after validation and *before* any noise is drawn; over-budget requests raise
:class:`~privstream.accounting.BudgetExceeded` and release nothing. Everything that can refuse a
release depends only on public parameters (sketch build and k, budget, domain, ledger, epoch) and
is checked before the charge; nothing after the charge can fail because of the data (stored keys
outside a declared domain are dropped, see :mod:`privstream.mechanisms.domain_topk`).

The ledger must fit the release's accounting (checked before charging, ValueError otherwise):

* its total is an (ε, δ) :class:`~privstream.accounting.Budget` — releases are (ε, δ)-DP
  statements; a ρ-zCDP ledger cannot be charged with them (convert its total with
  :func:`~privstream.accounting.zcdp_to_dp` and keep an (ε, δ) ledger);
* ``composition="parallel_epochs"`` is parallel composition over *disjoint* parts of the data, which
  holds for event-level releases of disjoint epochs only: such a ledger may only be charged by
  event-level releases that carry their ``epoch``. A user-level (PAMG, §8) privacy unit spans
  epochs (a user recurs), so user-level releases need a ``"sequential"`` ledger.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from privstream.accounting import Budget, PrivacyLedger
from privstream.mechanisms.domain_releases import (
    chan_error_bound,
    chan_values,
    pure_topk_error_bound,
    pure_topk_values,
)
from privstream.mechanisms.domain_topk import DeclaredDomain, Domain, declared_domain
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
_DOMAIN_SCOPE = ("scope", "declared domain only: stored keys outside it are dropped before noising")


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
    if k < 1:
        raise ValueError(f"sketch.k must be >= 1, got {k}")
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


def _check_applicable(name: str, build: Build, budget: Budget, domain: DeclaredDomain | None) -> None:
    """Raise :class:`MechanismNotApplicable` if mechanism ``name`` may not release a ``build`` sketch
    under ``budget`` (and ``domain``), ValueError if ``name`` is unknown. These are all of
    :func:`release`'s refusals of a mechanism; they depend on public parameters only and cost
    nothing (no calibration, no noise)."""
    if name not in MECHANISMS:
        raise ValueError(f"mechanism must be 'auto' or one of {MECHANISMS}, got {name!r}")
    if budget.epsilon <= 0:
        raise MechanismNotApplicable("budget.epsilon must be > 0 for a release")
    if name in ("pmg", "pmg_standard", "gshm", "laplace_threshold") and budget.delta <= 0:
        raise MechanismNotApplicable(
            f"{name} is (ε, δ)-DP and needs delta > 0; use pure_topk/chan_* with a domain"
        )
    if name in ("pure_topk", "chan_topk", "chan_pmg") and domain is None:
        raise MechanismNotApplicable(
            f"{name} adds noise to every element of a declared universe: pass domain="
        )
    if name == "pmg" and build is not Build.ALG1_SEQUENTIAL:
        raise MechanismNotApplicable(
            f"pmg (Lebeda-Tetek Alg. 2) needs a sequentially built Alg. 1 sketch; this one is {build.name} "
            "(§7: PMG must not be applied to merged sketches; use gshm or laplace_threshold)"
        )
    if name == "pmg_standard" and build not in _SEQUENTIAL:
        raise MechanismNotApplicable(
            f"pmg_standard (§5.1) needs a sequentially built MG sketch; this one is {build.name}"
        )
    if name == "pure_topk" and build not in _SEQUENTIAL:
        raise MechanismNotApplicable(
            f"pure_topk applies Alg. 3, whose ℓ1 < 2 bound (Lemma 6.2) needs a sequentially built MG sketch; "
            f"this one is {build.name} (for partitions use release_partitions)"
        )


def _plan(name: str, sketch: object, budget: Budget, domain: DeclaredDomain | None, beta: float) -> _Plan:
    """Calibrate mechanism ``name`` for ``sketch`` (after :func:`_check_applicable`)."""
    build, k = _sketch_facts(sketch)
    _check_applicable(name, build, budget, domain)
    eps, delta = budget.epsilon, budget.delta
    term = _sketch_term(build)
    if name == "pmg":
        thr = pmg_threshold(eps, delta)
        return _Plan(
            name,
            pmg_error_bound(eps, thr, k, beta),
            (("threshold", thr), ("noise", "two-sided geometric, scale 1/eps, shared + per-slot")),
            lambda rng: pmg_release(sketch.slots(), eps, thr, rng),  # type: ignore[attr-defined]
        )
    if name == "pmg_standard":
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
        reduced = reduce_sensitivity(sketch)  # type: ignore[arg-type]
        return _reduced_plan(reduced, eps, k, domain, beta)  # type: ignore[arg-type]
    if name in ("chan_topk", "chan_pmg"):
        # chan_pmg: Geom(exp(ε/(β+1))) with β = k (Chan et al. Lemma 2: ℓ1-sensitivity <= β + 1, also
        # >= the add/remove sensitivity k of Lebeda-Tetek Lemma 2); chan_topk: their Laplace(k/ε) baseline
        clamp = name == "chan_pmg"
        sensitivity = k + 1 if clamp else k
        return _Plan(
            name,
            chan_error_bound(eps, sensitivity, domain, beta, term),  # type: ignore[arg-type]
            (("scale", f"{sensitivity}/eps"), ("clamp_at_zero", clamp), ("k", k), _DOMAIN_SCOPE),
            lambda rng: chan_values(sketch.counters(), eps, k, sensitivity, domain, rng, clamp=clamp),  # type: ignore[arg-type, attr-defined]
        )
    raise ValueError(f"mechanism must be 'auto' or one of {MECHANISMS}, got {name!r}")


def _reduced_plan(reduced: Any, eps: float, k: int, domain: DeclaredDomain, beta: float) -> _Plan:
    den = reduced.denominator
    return _Plan(
        "pure_topk",
        pure_topk_error_bound(eps, den, domain, beta),
        (
            ("scale", f"2/eps on the 1/{den} lattice"),
            ("k", k),
            ("partitions", reduced.partitions),
            _DOMAIN_SCOPE,
        ),
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
    relation: str | None = None,
) -> Release:
    pure = plan.name in ("pure_topk", "chan_topk", "chan_pmg")
    charged = Budget(budget.epsilon, 0.0 if pure else budget.delta)
    source = resolve(rng)
    if ledger is not None:  # every refusal that depends only on public parameters happened above
        ledger.charge(charged, mechanism=plan.name, epoch=epoch, label=label)
    items = plan.sample(source)
    g = build.guarantees
    return Release(
        items=tuple(items),
        epsilon=charged.epsilon,
        delta=charged.delta,
        mechanism=plan.name,
        neighbour_relation=relation or g.neighbour_relation,
        privacy_unit=g.privacy_unit,
        error_bound=plan.error_bound,
        epoch=epoch,
        parameters=plan.parameters,
    )


def _check_request(
    budget: Budget,
    beta: float,
    rng: RandomSource | None,
    epoch: int | None,
    domain: Domain | None,
) -> DeclaredDomain | None:
    """Validate the public request parameters; return the validated domain (or None)."""
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be an accounting.Budget, not {type(budget).__name__}")
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 < beta < 1:
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}")
    if rng is not None and not isinstance(rng, RandomSource):
        raise TypeError(f"rng must be a RandomSource or None, not {type(rng).__name__}")
    if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
        raise TypeError(f"epoch must be an int or None, not {type(epoch).__name__}")
    return None if domain is None else declared_domain(domain)


def _check_ledger(ledger: PrivacyLedger | None, build: Build, epoch: int | None) -> None:
    """Refuse, before any charge, a ledger whose accounting does not fit this release (module
    docstring): (ε, δ) total; ``parallel_epochs`` only for event-level releases with an epoch."""
    if ledger is None:
        return
    if not isinstance(ledger, PrivacyLedger):
        raise TypeError(f"ledger must be a PrivacyLedger or None, not {type(ledger).__name__}")
    if not isinstance(ledger.total, Budget):
        raise ValueError(
            f"ledger: its total is a {type(ledger.total).__name__}, but releases are (ε, δ)-DP and are "
            "charged as (ε, δ) Budgets; use a ledger with an (ε, δ) Budget total "
            "(convert a zCDP allowance with accounting.zcdp_to_dp)"
        )
    if ledger.composition == "parallel_epochs":
        if build in _USER_LEVEL:
            raise ValueError(
                f"ledger: a user-level ({build.name}) release needs composition='sequential'; "
                "'parallel_epochs' assumes disjoint data per epoch, but a user recurs across epochs "
                "(Lebeda-Tetek §8 privacy unit = user)"
            )
        if epoch is None:
            raise ValueError(
                "epoch: a 'parallel_epochs' ledger composes disjoint epochs in parallel, so every "
                "event-level release charged to it must carry its epoch="
            )


def applicable_mechanisms(sketch: object, budget: Budget, *, domain: Domain | None = None) -> dict[str, str]:
    """Every mechanism name -> "" if valid for this sketch/budget/domain, else the reason it is not.

    The same checks as :func:`release`'s (:func:`_check_applicable`), without calibrating, charging
    or drawing anything, so asking is cheap. The answer depends on the sketch's build and m, not on
    its counts: an empty sketch of the right kind answers for every sketch of that kind."""
    declared = None if domain is None else declared_domain(domain)
    out = {}
    for name in MECHANISMS:
        try:
            build, _ = _sketch_facts(sketch)
            _check_applicable(name, build, budget, declared)
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
    group_size: int = 1,
) -> Release:
    """Privately release ``sketch`` under ``budget``.

    ``mechanism``: "auto" or one of :data:`MECHANISMS`; ``domain``: the declared universe (a
    ``range`` or a sequence of items) for the domain-wide mechanisms, which release over the
    declared domain only (stored keys outside it are dropped before noising); ``beta``: confidence
    of the reported error bound; ``ledger``: charged before noise is drawn, after every check.
    Raises :class:`MechanismNotApplicable` when the sketch does not meet the mechanism's
    assumptions, ValueError when the ledger's accounting does not fit the release (module
    docstring), TypeError/ValueError naming any other bad parameter.

    ``group_size`` g > 1 states the guarantee for neighbours that differ by g steps of the sketch's
    neighbour relation (e.g. g = 2 for "replace one event" = remove + add): by group privacy
    (Lebeda-Tetek Lemma 8.1: (ε', δ') for one step gives (gε', g·e^{gε'}·δ') for g steps) the
    mechanism is calibrated to ε' = ε/g, δ' = δ/(g·e^ε), while ``budget`` is what the release
    reports and the ledger is charged.
    """
    declared = _check_request(budget, beta, rng, epoch, domain)
    build, _ = _sketch_facts(sketch)
    _check_ledger(ledger, build, epoch)
    calibration = _group_calibration(budget, group_size)
    if mechanism == "auto":
        plans = []
        reasons = []
        for name in MECHANISMS:
            try:
                plans.append(_plan(name, sketch, calibration, declared, beta))
            except MechanismNotApplicable as exc:
                reasons.append(f"{name}: {exc}")
        if not plans:
            raise MechanismNotApplicable("no mechanism applies: " + "; ".join(reasons))
        plan = min(plans, key=lambda p: p.error_bound.max_noise_error)
    else:
        plan = _plan(mechanism, sketch, calibration, declared, beta)
    result = _finish(plan, build, budget, rng, epoch, ledger, label)
    if group_size == 1:
        return result
    return replace(
        result,
        neighbour_relation=f"{result.neighbour_relation}; the guarantee covers neighbours {group_size} such "
        "steps apart (group privacy, Lebeda-Tetek Lemma 8.1)",
        parameters=(*result.parameters, ("group_size", group_size)),
    )


def _group_calibration(budget: Budget, group_size: int) -> Budget:
    """The one-step budget whose g-step group guarantee is ``budget`` (Lemma 8.1)."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if group_size == 1:
        return budget
    return Budget(budget.epsilon / group_size, budget.delta / (group_size * math.exp(budget.epsilon)))


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
    Laplace(2/ε) on the universe + top-k (ε-DP; only one partition changes between neighbours).

    The guarantee is for one event added to or removed from *one partition*, every other partition
    unchanged (ℓ1 < 2 by Lemma 6.2 for the changed partition): the caller must have assigned events
    to partitions by a rule that does not depend on other events (a hash of the item or user, time
    slices closed by punctuation), never by position."""
    declared = _check_request(budget, beta, rng, epoch, domain)
    if declared is None:
        raise TypeError("domain must be a range or a sequence of items, not None")
    if not sketches:
        raise ValueError("sketches must not be empty")
    builds = set()
    for s in sketches:
        part_build, _ = _sketch_facts(s)
        if part_build not in _SEQUENTIAL:
            raise MechanismNotApplicable(
                f"release_partitions needs sequentially built partition sketches, got {part_build.name}"
            )
        builds.add(part_build)
    build = builds.pop()  # ALG1_ and STANDARD_SEQUENTIAL state the same event-level guarantees
    _check_ledger(ledger, build, epoch)
    reduced = sum_reduced([reduce_sensitivity(s) for s in sketches])  # type: ignore[arg-type]
    plan = _reduced_plan(reduced, budget.epsilon, reduced.k, declared, beta)
    return _finish(plan, build, budget, rng, epoch, ledger, label, _PARTITIONS_RELATION)


_PARTITIONS_RELATION = (
    "add/remove one event in one of the partitions, every other partition unchanged (Lebeda-Tetek §7, "
    "Alg. 3 per partition: l1 < 2, Lemma 6.2); covers one event of the whole input only where events "
    "were assigned to partitions by a rule that does not depend on other events, never by position"
)
