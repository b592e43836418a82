"""One entry point for private releases of sketches: :func:`release`; for sketches of disjoint
partitions of the input, :func:`release_disjoint` (any mechanism per partition, e.g. PMG per shard,
summed under one charge: parallel composition) and :func:`release_partitions` (the per-partition
Alg. 3 route, LT §7).

``release()`` is validate → select → charge → sample over the mechanism registry
(:mod:`privstream.mechanisms.registry`); nothing here is specific to one mechanism. Which mechanisms
a sketch admits follows from its build's guarantees (:class:`~privstream.sketches.BuildGuarantees`)
through each mechanism's declared structure predicate (Lebeda–Tětek):

=====================  ==============================================================  =========
mechanism              needs (structure predicate over the build's guarantees)         needs
=====================  ==============================================================  =========
``pmg``                sequential MG with Alg. 1 slots: ALG1_SEQUENTIAL (Alg. 2, §5.2)  δ > 0
``pmg_standard``       sequential MG (Lemma 2): ALG1_, STANDARD_SEQUENTIAL (§5.1)        δ > 0
``gshm``               one-signed changes of 1 on <= k keys: every MG build, l = k      δ > 0
                       (Thm 8.5; Thm 8.12 for PAMG)
``laplace_threshold``  one-signed changes of 1 on <= k keys: every MG build            δ > 0
``pure_topk``          sequential MG (Alg. 3's Lemma 6.2 rests on Lemma 2), §6          domain
``chan_topk``          l1 <= k: every MG build (Laplace(k/ε) on the universe, top k)    domain
``chan_pmg``           l1 <= k: every MG build (Geom(exp(ε/(k+1))), clamp, top k)       domain
``exact_threshold``    exact counts (EXACT: one count changes by 1), Laplace(1/ε) + T   δ > 0
=====================  ==============================================================  =========

PMG on a merged sketch is refused (§7: "we cannot run Algorithm 2 on the merged sketch"), as is any
user-level (PAMG) release without a positive bound m. ``mechanism="auto"`` considers every valid
mechanism for the budget (and the domain, if given) and picks by
:func:`~privstream.mechanisms.registry.auto_key`: the smallest systematic coefficient of the sketch
term (Alg. 3 subtracts up to n/(k+1) from every value), then the smallest noise error
``max(below, above)``; with a public ``n_bound`` (an upper bound on the stream length the caller
declares, never read from the sketch) the smallest noise error + systematic·n_bound/(k+1). The
choice depends on public parameters only — the build, k, m, budget, β, domain, n_bound — never on
the sketch's counts or n: calibration never sees the sketch.

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

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from privstream.accounting import Budget, PrivacyLedger, is_parallel
from privstream.mechanisms.builtin import BUILTIN
from privstream.mechanisms.domain_topk import DeclaredDomain, Domain, declared_domain
from privstream.mechanisms.registry import (
    Calibration,
    Mechanism,
    Request,
    auto_key,
    get,
    mechanisms,
    one_step_budget,
)
from privstream.mechanisms.release_types import ErrorBound, MechanismNotApplicable, Release
from privstream.noise.rng import RandomSource, resolve
from privstream.privacy import NeighbourRelation, Scope, Unit
from privstream.sketches import Build, Key, item_order_key, reduce_sensitivity, sum_reduced
from privstream.validation import check_int

logger = logging.getLogger(__name__)

#: The built-in mechanisms' names, in registration order (the live list is ``registry.names()``).
MECHANISMS: tuple[str, ...] = tuple(m.name for m in BUILTIN)

_PARTITIONS_RELATION = NeighbourRelation(
    Unit.EVENT,
    scope=Scope.PARTITIONS,
    references=("Lebeda-Tetek §7, Alg. 3 per partition: l1 < 2, Lemma 6.2",),
)
_PARTITIONS_TERM = "N/(k+1) (Lemma 6.1 summed over the partitions, N = total events)"


@dataclass(frozen=True)
class _Sketch:
    """What validation learnt about a sketch: public facts only (its build and k)."""

    build: Build
    k: int


def _sketch_facts(sketch: object) -> _Sketch:
    build = getattr(sketch, "build", None)
    k = getattr(sketch, "k", None)
    if (
        not isinstance(build, Build)
        or not isinstance(k, int)
        or not callable(getattr(sketch, "counters", None))
    ):
        raise TypeError(f"sketch must be a privstream Misra-Gries-type sketch, got {type(sketch).__name__}")
    k = check_int("sketch.k", k)
    if build.guarantees.user_level:
        try:
            check_int("m", getattr(sketch, "m", None))
        except (TypeError, ValueError) as exc:
            raise MechanismNotApplicable(
                "user-level release needs a bound m on each user's distinct items recorded on the sketch "
                f"(PAMG, Lebeda-Tetek §8); {exc}"
            ) from None
    return _Sketch(build, k)


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
    if epoch is not None:
        check_int("epoch", epoch, minimum=None)
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
    if is_parallel(ledger.composition):
        if build.guarantees.user_level:
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


def _check_group_size(group_size: int) -> int:
    return check_int("group_size", group_size, type_error=ValueError)


def _check_n_bound(n_bound: int | None) -> int | None:
    """None, or the caller's public bound on the stream length (never read from the sketch)."""
    return None if n_bound is None else check_int("n_bound", n_bound, minimum=0, type_error=ValueError)


def applicable_mechanisms(sketch: object, budget: Budget, *, domain: Domain | None = None) -> dict[str, str]:
    """Every registered mechanism name -> "" if valid for this sketch/budget/domain, else the reason.

    The same checks as :func:`release`'s (:meth:`Mechanism.refusal`), without calibrating, charging
    or drawing anything, so asking is cheap. The answer depends on the sketch's build and m, not on
    its counts: an empty sketch of the right kind answers for every sketch of that kind."""
    declared = None if domain is None else declared_domain(domain)
    out = {}
    for mech in mechanisms():
        try:
            facts = _sketch_facts(sketch)
        except MechanismNotApplicable as exc:
            out[mech.name] = str(exc)
            continue
        out[mech.name] = mech.refusal(facts.build, budget, declared) or ""
    return out


#: How ``auto`` ranks a calibrated candidate (smaller is better): by default :func:`auto_key` of its
#: bound; :func:`release_disjoint` ranks the bound it will finally state (summed over partitions).
Rank = Callable[[Mechanism, Calibration, int | None], tuple[float, float]]


def _default_rank(
    mech: Mechanism, calibration: Calibration, n_bound: int | None, *, k: int
) -> tuple[float, float]:
    return auto_key(calibration.error_bound, k, n_bound)


def _select(
    mechanism: str, build: Build, request: Request, n_bound: int | None, rank: Rank | None = None
) -> tuple[Mechanism, Calibration]:
    """The mechanism to run and its calibration: ``mechanism`` itself (refused with the reason if
    its declared needs are not met), or for "auto" the valid one with the smallest ``rank``
    (default :func:`auto_key` of its bound; registration order breaks ties). Public parameters only."""
    budget, domain = request.budget, request.domain
    if mechanism != "auto":
        chosen = get(mechanism)
        reason = chosen.refusal(build, budget, domain)
        if reason:
            raise MechanismNotApplicable(reason)
        return chosen, chosen.calibrate(request)
    candidates: list[tuple[Mechanism, Calibration]] = []
    reasons = []
    for mech in mechanisms():
        reason = mech.refusal(build, budget, domain)
        if reason:
            reasons.append(f"{mech.name}: {reason}")
        else:
            candidates.append((mech, mech.calibrate(request)))
    if not candidates:
        raise MechanismNotApplicable("no mechanism applies: " + "; ".join(reasons))
    by = rank or partial(_default_rank, k=request.k)
    return min(candidates, key=lambda c: by(c[0], c[1], n_bound))


def _charge_and_sample(
    mech: Mechanism,
    calibration: Calibration,
    prepared: object,
    request: Request,
    relation: NeighbourRelation,
    budget: Budget,
    rng: RandomSource | None,
    epoch: int | None,
    ledger: PrivacyLedger | None,
    label: str,
    partitioned: bool = False,
) -> Release:
    """Charge the ledger once (every refusal happened before this), then draw the noise: if
    ``partitioned``, ``prepared`` holds one prepared sketch per partition (one or more), each released by the
    mechanism with the same calibration, in partition order, and the values are summed per key."""
    charged = mech.privacy.charged(budget)
    source = resolve(rng)
    if ledger is not None:
        ledger.charge(charged, mechanism=mech.name, epoch=epoch, label=label)
    if not partitioned:
        items = mech.sample(prepared, request, calibration, source)
    else:
        items = _sum_items(mech.sample(part, request, calibration, source) for part in prepared)  # type: ignore[attr-defined]
    parameters = calibration.parameters
    if relation.group_size > 1:
        parameters = (*parameters, ("group_size", relation.group_size))
    logger.debug("released epoch %s with %s (%d keys)", epoch, mech.name, len(items))
    return Release(
        items=tuple(items),
        epsilon=charged.epsilon,
        delta=charged.delta,
        mechanism=mech.name,
        relation=relation,
        error_bound=calibration.error_bound,
        epoch=epoch,
        parameters=parameters,
    )


def _plan(
    facts: _Sketch,
    budget: Budget,
    mechanism: str,
    beta: float,
    declared: DeclaredDomain | None,
    ledger: PrivacyLedger | None,
    epoch: int | None,
    group_size: int,
    n_bound: int | None,
    rank: Rank | None = None,
) -> tuple[Mechanism, Calibration, Request, int]:
    """The public part of a release, before anything is charged or drawn: check the ledger, group
    size and n_bound, select and calibrate the mechanism for the one-step budget (group privacy,
    Lemma 8.1) at confidence ``beta``, and check that its privacy map gives what is stated.
    Returns (mechanism, calibration, request, group size)."""
    _check_ledger(ledger, facts.build, epoch)
    g = _check_group_size(group_size)
    _check_n_bound(n_bound)
    if mechanism != "auto":
        get(mechanism)  # unknown names: ValueError before anything else
    term = facts.build.guarantees.sketch_term
    request = Request(facts.k, one_step_budget(budget, g), beta, declared, term)
    chosen, calibration = _select(mechanism, facts.build, request, n_bound, rank)
    if not chosen.privacy.covers(request.budget, g, budget):  # the declared map must give what is stated
        raise AssertionError(f"{chosen.name}: privacy map at {g} steps exceeds the stated {budget}")
    return chosen, calibration, request, g


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
    n_bound: int | None = None,
) -> Release:
    """Privately release ``sketch`` under ``budget``: validate → select → charge → sample.

    ``mechanism``: "auto" or a registered name (:data:`MECHANISMS`); ``domain``: the declared
    universe (a ``range`` or a sequence of items) for the domain-wide mechanisms, which release over
    the declared domain only (stored keys outside it are dropped before noising); ``beta``:
    confidence of the reported error bound; ``ledger``: charged before noise is drawn, after every
    check; ``n_bound``: an optional *public* upper bound on the stream length (declared by the
    caller, never derived from the data) that ``auto`` uses to weigh Alg. 3's subtraction
    (:func:`~privstream.mechanisms.registry.auto_key`). Raises :class:`MechanismNotApplicable` when
    the sketch does not meet the mechanism's assumptions, ValueError when the ledger's accounting
    does not fit the release (module docstring), TypeError/ValueError naming any other bad parameter.

    ``group_size`` g > 1 states the guarantee for neighbours that differ by g steps of the sketch's
    neighbour relation (e.g. g = 2 for "replace one event" = remove + add): the mechanism is
    calibrated to the one-step budget whose privacy map at g steps is ``budget`` (Lebeda-Tetek
    Lemma 8.1: ε' = ε/g, δ' = δ/(g·e^ε)), while ``budget`` is what the release reports and the
    ledger is charged.
    """
    declared = _check_request(budget, beta, rng, epoch, domain)
    facts = _sketch_facts(sketch)
    chosen, calibration, request, g = _plan(
        facts, budget, mechanism, float(beta), declared, ledger, epoch, group_size, n_bound
    )
    prepared = chosen.prepare(sketch)  # data-independent success (Alg. 3 for pure_topk), before the charge
    relation = facts.build.guarantees.relation.with_group_size(g)
    return _charge_and_sample(
        chosen, calibration, prepared, request, relation, budget, rng, epoch, ledger, label
    )


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
    Laplace(2/ε) on the universe + top-k (ε-DP; only one partition changes between neighbours):
    the registered ``pure_topk`` mechanism on the summed reduced sketch.

    The guarantee is for one event added to or removed from *one partition*, every other partition
    unchanged (ℓ1 < 2 by Lemma 6.2 for the changed partition): the caller must have assigned events
    to partitions by a rule that does not depend on other events (a hash of the item or user, time
    slices closed by punctuation), never by position."""
    declared = _check_request(budget, beta, rng, epoch, domain)
    if declared is None:
        raise TypeError("domain must be a range or a sequence of items, not None")
    if not sketches:
        raise ValueError("sketches must not be empty")
    mech = get("pure_topk")
    parts = [_sketch_facts(s) for s in sketches]
    for i, part in enumerate(parts):
        reason = mech.refusal(part.build, budget, declared)
        if reason:
            raise MechanismNotApplicable(f"release_partitions: partition {i}: {reason}")
    ks = {part.k for part in parts}
    if len(ks) != 1:
        raise ValueError(f"sketches: every partition sketch must have the same k, got {sorted(ks)}")
    build = parts[0].build  # ALG1_ and STANDARD_SEQUENTIAL state the same event-level guarantees
    _check_ledger(ledger, build, epoch)
    request = Request(ks.pop(), budget, float(beta), declared, _PARTITIONS_TERM, partitions=len(parts))
    calibration = mech.calibrate(request)
    reduced = sum_reduced([reduce_sensitivity(s) for s in sketches])  # type: ignore[arg-type]
    return _charge_and_sample(
        mech, calibration, reduced, request, _PARTITIONS_RELATION, budget, rng, epoch, ledger, label
    )


def _sum_items(releases: Iterable[Sequence[tuple[Key, int]]]) -> tuple[tuple[Key, int], ...]:
    """The key-wise sum of several releases, sorted by the universe's order (post-processing)."""
    total: dict[Key, int] = {}
    for items in releases:
        for x, v in items:
            total[x] = total.get(x, 0) + v
    return tuple(sorted(total.items(), key=lambda p: item_order_key(p[0])))


def _disjoint_bound(bound: ErrorBound, parts: int, keys_disjoint: bool) -> ErrorBound:
    """The error bound of the summed release: each partition's calibration holds with β/parts, so all
    hold at once with β (union bound). With ``keys_disjoint`` an item's value comes from its one
    partition; otherwise up to ``parts`` partitions add their error to it."""
    factor = 1 if keys_disjoint else parts
    where = "its one partition (keys disjoint)" if keys_disjoint else f"up to {parts} partitions (summed)"
    return replace(
        bound,
        below=bound.below * factor,
        above=bound.above * factor,
        beta=bound.beta * parts,
        sketch_term=(
            f"{bound.sketch_term} of the item's partition"
            if keys_disjoint
            else f"the sum over partitions of {bound.sketch_term}"
        ),
        derivation=f"per partition at beta/{parts}: {bound.derivation}; an item's value comes from {where}",
    )


def release_disjoint(
    sketches: Sequence[object],
    budget: Budget,
    *,
    mechanism: str = "auto",
    keys_disjoint: bool = True,
    rng: RandomSource | None = None,
    epoch: int | None = None,
    domain: Domain | None = None,
    beta: float = 0.05,
    ledger: PrivacyLedger | None = None,
    label: str = "",
    group_size: int = 1,
    n_bound: int | None = None,
) -> Release:
    """Release each partition's sketch with ``mechanism`` under the whole ``budget`` and sum the
    releases key-wise: parallel composition over disjoint partitions of the input (McSherry 2009,
    Thm 4; the untrusted-aggregator route of Lebeda–Tětek §7, with PMG as the per-sketch release).

    Why one charge of ``budget`` suffices: neighbours differ in one unit, which lies in exactly one
    partition *if units were assigned to partitions by a rule that does not depend on other units*
    (a hash of the item or user, time slices closed by punctuation — never by position). Then every
    other partition's sketch, and so its release, has the same law on both inputs, and the changed
    partition's release is (ε, δ)-DP by the mechanism's own theorem (for PMG: its sketch is a
    sequential Alg. 1 sketch of that partition's stream, Lemma 2 / Thm 8). The sum is
    post-processing. The stated relation is "one unit in one of the partitions" (``Scope.PARTITIONS``).

    Every sketch must have the same build and k (public); the mechanism (or ``auto``'s choice,
    which depends on public parameters only) is calibrated once at β/len(sketches), so that the
    stated bound holds for every partition at once with probability >= 1 − β. ``keys_disjoint``
    (public: the partition rule hashes the item) means an item occurs in one partition only, so its
    error is one partition's; otherwise — and always for the domain-wide mechanisms, which noise
    every domain item in every partition — the bound is the sum of the partitions' bounds.
    ``n_bound``: a public bound on each partition's stream length, for ``auto``. The ledger is
    charged once, before any noise is drawn; other parameters as for :func:`release`."""
    declared = _check_request(budget, beta, rng, epoch, domain)
    if isinstance(sketches, str | bytes) or not isinstance(sketches, Sequence) or not sketches:
        raise ValueError("sketches: a non-empty sequence of partition sketches")
    if not isinstance(keys_disjoint, bool):
        raise TypeError(f"keys_disjoint must be a bool, not {type(keys_disjoint).__name__}")
    parts = [_sketch_facts(s) for s in sketches]
    builds, ks = {p.build for p in parts}, {p.k for p in parts}
    if len(builds) != 1 or len(ks) != 1:
        raise ValueError(
            "sketches: every partition sketch must have the same build and k, got "
            f"{sorted(b.name for b in builds)} and k in {sorted(ks)}"
        )
    count = len(parts)

    def disjoint(mech: Mechanism) -> bool:  # a domain-wide mechanism noises every item in every partition
        return keys_disjoint and not mech.needs_domain

    def rank(mech: Mechanism, calibration: Calibration, n_part: int | None) -> tuple[float, float]:
        """auto_key of the bound this release will state: summed over partitions unless disjoint."""
        stated = _disjoint_bound(calibration.error_bound, count, disjoint(mech))
        n_items = None if n_part is None else n_part * (1 if disjoint(mech) else count)
        return auto_key(stated, k, n_items)

    k = parts[0].k
    chosen, calibration, request, g = _plan(
        parts[0], budget, mechanism, float(beta) / count, declared, ledger, epoch, group_size, n_bound, rank
    )
    guarantees = parts[0].build.guarantees
    prepared = [chosen.prepare(s) for s in sketches]  # before the charge, as in release()
    calibration = replace(
        calibration,
        # a domain-wide mechanism noises every domain item in every partition: P noisy values per item
        error_bound=_disjoint_bound(calibration.error_bound, count, disjoint(chosen)),
        parameters=(*calibration.parameters, ("partitions", count)),
    )
    relation = replace(
        guarantees.relation,
        scope=Scope.PARTITIONS,
        references=(*guarantees.relation.references, "parallel composition over partitions (McSherry 2009)"),
    ).with_group_size(g)
    return _charge_and_sample(
        chosen, calibration, prepared, request, relation, budget, rng, epoch, ledger, label, partitioned=True
    )
