"""``release_disjoint``: every partition's sketch released with one calibration, the releases summed
key-wise, the ledger charged once (parallel composition over a partition of the input).

* the ledger is charged exactly once with the budget, never once per partition, before any noise;
* each partition is calibrated at β/P — the release is the key-wise sum of P single releases at
  β/P drawn in partition order from the same source — and the bound is one partition's (keys
  disjoint) or the sum of P (not), at confidence β;
* refusals (mixed builds or k, no partitions, PMG on merged sketches, unknown mechanisms …) come
  before the charge;
* the relation renders "one of the partitions";
* Monte Carlo coverage of the stated bound on a Zipf stream over 4 shards, and ``auto``'s choice
  against every valid mechanism's total bound (with and without a public n_bound).

Monte Carlo tests use fixed seeds; each asserts that the number of runs violating the stated
interval is at most the 1 − 1e-3 quantile of Binomial(R, β): a release whose bound holds with
probability exactly 1 − β fails such a test with probability <= 1e-3.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from privstream.accounting import Budget, BudgetExceeded, PrivacyLedger
from privstream.mechanisms import (
    ErrorBound,
    MechanismNotApplicable,
    applicable_mechanisms,
    get,
    release,
    release_disjoint,
)
from privstream.noise import SeededRandomSource
from privstream.partitioning import partition_for
from privstream.privacy import Scope
from privstream.sketches import (
    Build,
    ExactHistogram,
    MisraGries,
    PrivacyAwareMisraGries,
    StandardMisraGries,
    merge_in_order,
)

BUDGET = Budget(1.0, 1e-6)
K = 16
P = 4


def zipf_items(seed: int, n: int = 20000, universe: int = 1000) -> np.ndarray:
    return (np.random.default_rng(seed).zipf(1.3, n) % universe).astype(np.int64)


def item_shards(items: np.ndarray, parts: int = P, k: int = K) -> list[MisraGries]:
    """The job's per-shard sketches: items routed by a hash of the item, each shard's stream fed to
    its own Alg. 1 sketch in batches."""
    routed = partition_for(items, parts)
    out = []
    for s in range(parts):
        mine = items[routed == s]
        sketch = MisraGries(k)
        for start in range(0, len(mine), 500):
            sketch.update_batch(mine[start : start + 500])
        out.append(sketch)
    return out


SHARDS = item_shards(zipf_items(1))


# ------------------------------------------------------------------------- (a) one charge


def test_the_ledger_is_charged_exactly_once_with_the_budget() -> None:
    """A ledger whose total is exactly one budget accepts the release of all P partitions (P
    charges would exceed it), records one entry of the budget, and refuses a second release before
    any noise is drawn (the source is untouched)."""
    ledger = PrivacyLedger(BUDGET, composition="sequential")
    out = release_disjoint(SHARDS, BUDGET, rng=SeededRandomSource(1), ledger=ledger, label="hh")
    head = ledger.head
    assert ledger.sequence == 1 and head is not None
    assert (head.budget, head.mechanism, head.label) == (BUDGET, out.mechanism, "hh")
    assert ledger.spent() == BUDGET and (out.epsilon, out.delta) == (1.0, 1e-6)
    rng = SeededRandomSource(2)
    with pytest.raises(BudgetExceeded):
        release_disjoint(SHARDS, BUDGET, rng=rng, ledger=ledger)
    assert rng.randbits(64) == SeededRandomSource(2).randbits(64)  # no noise was drawn
    assert ledger.sequence == 1
    epochs = PrivacyLedger(BUDGET, composition="parallel_epochs")
    for epoch in range(3):  # disjoint epochs: one charge each, in parallel
        release_disjoint(SHARDS, BUDGET, epoch=epoch, rng=SeededRandomSource(epoch), ledger=epochs)
        assert epochs.head is not None and (epochs.sequence, epochs.head.epoch) == (epoch + 1, epoch)
    assert epochs.spent() == BUDGET
    with pytest.raises(ValueError, match="epoch"):
        release_disjoint(SHARDS, BUDGET, ledger=epochs)  # a parallel_epochs ledger needs the epoch
    pure = PrivacyLedger(Budget(1.0, 0.5), composition="sequential")
    release_disjoint(SHARDS, Budget(1.0), mechanism="chan_topk", domain=range(50), ledger=pure)
    assert pure.head is not None and pure.head.budget == Budget(1.0, 0.0)  # pure mechanisms charge δ = 0


# ---------------------------------------------------- (b) calibration at β/P and the bound


@pytest.mark.parametrize("mechanism", ["pmg", "pmg_standard", "gshm", "laplace_threshold"])
@pytest.mark.parametrize("keys_disjoint", [True, False])
def test_each_partition_is_released_at_beta_over_p_and_summed(mechanism: str, keys_disjoint: bool) -> None:
    """The release is the key-wise sum of P single releases calibrated at β/P, drawn in partition
    order from one source; its bound is one partition's (keys disjoint) or P times it, at β."""
    beta = 0.05
    out = release_disjoint(
        SHARDS, BUDGET, mechanism=mechanism, keys_disjoint=keys_disjoint, beta=beta, rng=SeededRandomSource(7)
    )
    shared = SeededRandomSource(7)
    singles = [release(s, BUDGET, mechanism=mechanism, beta=beta / P, rng=shared) for s in SHARDS]
    total: Counter = Counter()
    for single in singles:
        total.update(dict(single.items))
    assert dict(out.items) == dict(total) and [x for x, _ in out.items] == sorted(total)
    assert out.mechanism == mechanism and len(out.items) >= 5
    one = singles[0].error_bound
    assert all(s.error_bound == one for s in singles)  # one calibration for every partition
    factor = 1 if keys_disjoint else P
    bound = out.error_bound
    assert (bound.below, bound.above) == (factor * one.below, factor * one.above)
    assert bound.beta == pytest.approx(beta) and one.beta == pytest.approx(beta / P)
    assert bound.systematic == one.systematic == 0.0
    assert f"beta/{P}" in bound.derivation
    assert ("one partition" in bound.derivation) is keys_disjoint
    assert ("item's partition" in bound.sketch_term) is keys_disjoint
    assert dict(out.parameters)["partitions"] == P
    assert out.parameters[: len(singles[0].parameters)] == singles[0].parameters
    # a calibration at β (not β/P) would be smaller: the union over partitions is paid for
    at_beta = release(SHARDS[0], BUDGET, mechanism=mechanism, beta=beta, rng=SeededRandomSource(7))
    assert at_beta.error_bound.noise_error < one.noise_error


def test_group_size_and_exact_histograms() -> None:
    """group_size g calibrates each partition to the one-step budget (Lemma 8.1) and states the g
    steps; exact histograms (hash-partitioned items) release with exact_threshold per partition."""
    grouped = release_disjoint(SHARDS, BUDGET, mechanism="pmg", group_size=2, rng=SeededRandomSource(3))
    single = release(
        SHARDS[0], BUDGET, mechanism="pmg", group_size=2, beta=0.05 / P, rng=SeededRandomSource(3)
    )
    assert grouped.error_bound.above == single.error_bound.above
    assert grouped.relation.group_size == 2 and "2 such steps apart" in grouped.neighbour_relation
    assert ("group_size", 2) in grouped.parameters
    items = zipf_items(2, 5000, 300)
    routed = partition_for(items, 3)
    exact = []
    for s in range(3):
        h = ExactHistogram()
        h.update_batch(items[routed == s])
        exact.append(h)
    out = release_disjoint(exact, BUDGET, rng=SeededRandomSource(4))
    assert out.mechanism == "exact_threshold" and out.error_bound.sketch_term.startswith("0 (exact counts)")
    truth = Counter(items.tolist())
    heavy = [x for x, c in truth.items() if c > 200]
    assert heavy and all(abs(dict(out.items)[x] - truth[x]) <= out.error_bound.above for x in heavy)


# ---------------------------------------------------------------------------- (c) refusals


def test_refusals_come_before_the_charge() -> None:
    ledger = PrivacyLedger(Budget(10.0, 1e-3), composition="sequential")
    standard = StandardMisraGries(K)
    standard.update_batch([1, 2, 3])
    merged = [merge_in_order(SHARDS[:2]), merge_in_order(SHARDS[2:])]
    cases: list[tuple[object, dict, type[Exception], str]] = [
        ([SHARDS[0], standard], {}, ValueError, "same build and k"),
        ([SHARDS[0], MisraGries(K + 1)], {}, ValueError, "same build and k"),
        ([], {}, ValueError, "non-empty"),
        (SHARDS[0], {}, ValueError, "sequence"),  # one sketch is not a list of partitions
        ("sketches", {}, ValueError, "sequence"),
        (iter(SHARDS), {}, ValueError, "sequence"),
        ([{1: 2}], {}, TypeError, "sketch"),
        (merged, {"mechanism": "pmg"}, MechanismNotApplicable, "sequentially"),  # §7: no PMG on a merge
        (merged, {"mechanism": "pmg_standard"}, MechanismNotApplicable, "sequential"),
        (SHARDS, {"mechanism": "nope"}, ValueError, "mechanism"),
        (SHARDS, {"mechanism": "exact_threshold"}, MechanismNotApplicable, "exact counts"),
        (SHARDS, {"mechanism": "pure_topk"}, MechanismNotApplicable, "domain"),
        (SHARDS, {"keys_disjoint": 1}, TypeError, "keys_disjoint"),
        (SHARDS, {"beta": 1.5}, ValueError, "beta"),
        (SHARDS, {"n_bound": -1}, ValueError, "n_bound"),
        (SHARDS, {"group_size": 0}, ValueError, "group_size"),
        ([PrivacyAwareMisraGries(K, 2)] * 2, {"mechanism": "pmg"}, MechanismNotApplicable, "sequentially"),
    ]
    for sketches, kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            release_disjoint(sketches, BUDGET, ledger=ledger, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(MechanismNotApplicable, match="no mechanism applies"):
        release_disjoint(SHARDS, Budget(1.0, 0.0), ledger=ledger)  # δ = 0 and no domain
    assert ledger.sequence == 0
    # the merged sketches themselves are fine for the mechanisms that accept them
    out = release_disjoint(merged, BUDGET, keys_disjoint=False, ledger=ledger, rng=SeededRandomSource(1))
    assert out.mechanism in ("gshm", "laplace_threshold") and ledger.sequence == 1
    assert merged[0].build is Build.MERGED


# ------------------------------------------------------------------------------ (f) relation


def test_the_relation_is_one_unit_in_one_of_the_partitions() -> None:
    out = release_disjoint(SHARDS, BUDGET, rng=SeededRandomSource(1), epoch=3)
    assert out.relation.scope is Scope.PARTITIONS and out.epoch == 3
    text = out.neighbour_relation
    assert text.startswith("add/remove one event in one of the partitions, every other partition unchanged")
    assert "parallel composition over partitions (McSherry 2009)" in text and "never by position" in text
    assert out.statement.startswith("(ε, δ)-DP, ε=1, δ=1e-06, for neighbours: add/remove one event in one of")
    users = [PrivacyAwareMisraGries(K, 2) for _ in range(2)]
    for i, sketch in enumerate(users):
        sketch.update_batch([(i, 100), (i, 101), (7,)])
    user_out = release_disjoint(users, BUDGET, keys_disjoint=False, rng=SeededRandomSource(2))
    assert user_out.neighbour_relation.startswith("add/remove one user (one set of <= m distinct items) in")
    assert (
        "one of the partitions" in user_out.neighbour_relation and "Lemma 8.9" in user_out.neighbour_relation
    )
    assert user_out.privacy_unit.startswith("user")


# ------------------------------------------------------------------------------ (e) coverage


class Truth:
    """The true counts of ``items`` and each item's sketch term S: its shard's n/(k+1) when keys are
    disjoint (an item lies in one shard), else N/(k+1) (summed over the shards)."""

    def __init__(self, items: np.ndarray, shards_of: np.ndarray, disjoint: bool) -> None:
        self.counts = Counter(items.tolist())
        sizes = Counter(shards_of.tolist())
        shard = dict(zip(items.tolist(), shards_of.tolist(), strict=True))
        self.slack = {x: (sizes[shard[x]] if disjoint else len(items)) / (K + 1) for x in self.counts}

    def violated(self, out_items, bound) -> bool:  # noqa: ANN001
        """Whether some item lies outside [f − below − S, f + above] (unreleased items: value 0)."""
        got = dict(out_items)
        if any(x not in self.counts and v > bound.above for x, v in got.items()):
            return True
        return any(
            not f - bound.below - self.slack[x] <= got.get(x, 0) <= f + bound.above
            for x, f in self.counts.items()
        )


@pytest.mark.parametrize("mechanism", ["pmg", "gshm"])
def test_coverage_on_a_zipf_stream_over_four_item_hashed_shards(mechanism: str) -> None:
    """Every item's released value lies in [f − below − n_p/(k+1), f + above] (n_p: its shard's
    length) in >= 1 − β of the runs, simultaneously for all items."""
    items = zipf_items(11, 8000, 400)
    truth = Truth(items, partition_for(items, P), disjoint=True)
    shards = item_shards(items)
    runs, beta = 400, 0.05
    rng = SeededRandomSource(f"coverage-{mechanism}")
    bad = tight_bad = 0
    for _ in range(runs):
        out = release_disjoint(shards, BUDGET, mechanism=mechanism, beta=beta, rng=rng)
        bad += truth.violated(out.items, out.error_bound)
        tight = replace(out.error_bound, below=out.error_bound.below / 8, above=out.error_bound.above / 8)
        tight_bad += truth.violated(out.items, tight)
    assert bad <= stats.binom.ppf(1 - 1e-3, runs, beta), bad
    assert tight_bad > runs // 2  # the check has teeth: an eighth of the bound fails most runs


def test_coverage_when_keys_are_not_disjoint() -> None:
    """Events routed by a hash of a (random) user, so an item occurs in several shards: the summed
    bound P·below + N/(k+1) below, P·above above, holds in >= 1 − β of the runs."""
    rng_np = np.random.default_rng(12)
    items = zipf_items(12, 8000, 400)
    users = rng_np.integers(0, 10**6, size=len(items))
    routed = partition_for(users, P)
    shards = []
    for s in range(P):
        sketch = MisraGries(K)
        sketch.update_batch(items[routed == s])
        shards.append(sketch)
    runs, beta = 400, 0.05
    rng = SeededRandomSource("coverage-users")
    truth = Truth(items, routed, disjoint=False)
    bad = 0
    for _ in range(runs):
        out = release_disjoint(shards, BUDGET, keys_disjoint=False, beta=beta, rng=rng)
        bad += truth.violated(out.items, out.error_bound)
    assert out.error_bound.below > 0 and bad <= stats.binom.ppf(1 - 1e-3, runs, beta), bad


def test_coverage_of_domain_wide_mechanisms_with_disjoint_keys() -> None:
    """chan_topk on each of 4 item-hashed partitions over a declared domain: every partition
    releases its top k of noisy values over the *whole* domain, including items it never saw, so
    the stated bound must be the sum of the partitions' bounds even when keys are disjoint, and hold
    in >= 1 − β of the runs. (Stating one partition's bound, as a first version did, was violated
    in ~20% of the runs at β = 0.05, all above f + above.)"""
    items = zipf_items(13, 8000, 40)
    routed = partition_for(items, P)
    shards = item_shards(items)
    runs, beta = 200, 0.05
    rng = SeededRandomSource("coverage-chan")
    bad = 0
    for _ in range(runs):
        out = release_disjoint(
            shards, Budget(1.0), mechanism="chan_topk", domain=range(40), beta=beta, rng=rng
        )
        truth = Truth(items, routed, disjoint="item's partition" in out.error_bound.sketch_term)
        bad += truth.violated(out.items, out.error_bound)
    assert bad <= stats.binom.ppf(1 - 1e-3, runs, beta), bad


# ---------------------------------------------------------------------- auto against the rest


#: (k, ε) pairs of the auto property tests (GSHM's calibration, cached per (ε, δ, k), dominates)
GRID = ((2, 0.5), (8, 1.0), (32, 3.0))


def _bounds(sketch: MisraGries, budget: Budget, domain: range) -> dict[str, ErrorBound]:
    """Every valid mechanism's error bound for this sketch, budget and domain (public only)."""
    return {
        name: release(sketch, budget, mechanism=name, domain=domain, rng=SeededRandomSource(0)).error_bound
        for name, reason in applicable_mechanisms(sketch, budget, domain=domain).items()
        if not reason
    }


def test_auto_never_picks_a_larger_total_bound_than_another_valid_mechanism() -> None:
    """Over a grid of k, ε, δ and public n_bound (with a domain, so every family competes), auto's
    total bound beyond the sketch's own under-count, noise_error + systematic·n_bound/(k+1), is the
    smallest of the valid mechanisms' — for release and for release_disjoint (per-partition n_bound)."""
    items = [int(x) for x in zipf_items(5, 400, 40)]
    domain = range(40)
    checked, winners = 0, set()
    for (k, eps), delta in itertools.product(GRID, (1e-6, 0.0)):
        sketch = MisraGries(k)
        sketch.update_batch(items)
        budget = Budget(eps, delta)
        bounds = _bounds(sketch, budget, domain)
        for n_bound in (0, 50, 2000, 10**6):
            totals = {name: b.noise_error + b.systematic * n_bound / (k + 1) for name, b in bounds.items()}
            chosen = release(sketch, budget, domain=domain, n_bound=n_bound, rng=SeededRandomSource(1))
            assert totals[chosen.mechanism] <= min(totals.values()) * (1 + 1e-12), (k, eps, delta, n_bound)
            winners.add(chosen.mechanism)
            checked += 1
        # release_disjoint calibrates each partition at β/P and minimises the total it *states*:
        # one partition's for a keys-disjoint sketch mechanism, P partitions' for a domain-wide one
        parts = release_disjoint(
            [sketch, sketch], budget, domain=domain, n_bound=2000, rng=SeededRandomSource(2)
        )
        per_part = _bounds_at(sketch, budget, domain, 0.05 / 2)
        factor = {name: 2 if get(name).needs_domain else 1 for name in per_part}
        totals = {
            name: factor[name] * (b.noise_error + b.systematic * 2000 / (k + 1))
            for name, b in per_part.items()
        }
        assert totals[parts.mechanism] <= min(totals.values()) * (1 + 1e-12), (k, eps, delta)
    assert checked == len(GRID) * 2 * 4 and {"pure_topk", "pmg"} <= winners  # both regimes occur in the grid


def _bounds_at(sketch: MisraGries, budget: Budget, domain: range, beta: float) -> dict[str, ErrorBound]:
    return {
        name: release(
            sketch, budget, mechanism=name, domain=domain, beta=beta, rng=SeededRandomSource(0)
        ).error_bound
        for name, reason in applicable_mechanisms(sketch, budget, domain=domain).items()
        if not reason
    }


def test_auto_without_n_bound_never_prefers_pure_topk_on_an_alg1_sketch() -> None:
    """Without a public n_bound the sketch term is unbounded: auto never picks pure_topk (it
    subtracts up to n/(k+1) from every value, systematic 1) while a systematic-0 mechanism (PMG with
    δ > 0, Chan's with δ = 0) is valid — even where pure_topk's noise bound is the smallest."""
    items = [int(x) for x in zipf_items(6, 400, 30)]
    smaller_noise = 0
    for (k, eps), delta, d in itertools.product(GRID, (1e-6, 0.0), (10, 30, 1000)):
        sketch = MisraGries(k)
        sketch.update_batch(items)
        budget, domain = Budget(eps, delta), range(d)
        chosen = release(sketch, budget, domain=domain, rng=SeededRandomSource(2))
        assert chosen.mechanism != "pure_topk" and chosen.error_bound.systematic == 0.0
        pure = release(sketch, budget, mechanism="pure_topk", domain=domain, rng=SeededRandomSource(2))
        smaller_noise += pure.error_bound.noise_error < chosen.error_bound.noise_error
        if d == 30:
            disjoint = release_disjoint([sketch, sketch], budget, domain=domain, rng=SeededRandomSource(3))
            assert disjoint.mechanism != "pure_topk"
    assert smaller_noise > 0  # the cases the old rule (smallest noise only) got wrong are in the grid


def test_release_disjoint_auto_ranks_the_bound_it_states() -> None:
    """auto ranks each candidate by the bound the summed release states: a domain-wide mechanism
    (pure_topk) noises every item in every partition, so its stated bound is P times one
    partition's, while PMG's (keys disjoint) is one partition's. With a small public n_bound, auto
    never picks a mechanism whose stated total is larger than PMG's."""
    items = zipf_items(7, 20000, 20)
    budget, domain = Budget(1.0, 1e-6), range(20)
    for parts in (1, 2, 4, 8):
        shards = item_shards(items, parts, 32)
        chosen = release_disjoint(shards, budget, domain=domain, n_bound=33, rng=SeededRandomSource(1))
        totals = {}
        for name in ("pmg", "pure_topk"):
            rel = release_disjoint(
                shards, budget, mechanism=name, domain=domain, n_bound=33, rng=SeededRandomSource(1)
            )
            n_items = 33 * (1 if name == "pmg" else parts)
            totals[name] = rel.error_bound.noise_error + rel.error_bound.systematic * n_items / 33
        assert totals[chosen.mechanism] <= min(totals.values()), (parts, chosen.mechanism, totals)
    shards = item_shards(items, 4, 32)
    assert release_disjoint(shards, budget, domain=domain, rng=SeededRandomSource(1)).mechanism == "pmg"


def test_one_partition_releases_and_charges_once() -> None:
    """A single partition (a one-partition topic) is released like any other count of partitions:
    the release succeeds after the charge, and equals release() of that sketch at the same β."""
    items = zipf_items(3, 5000, 30)
    (sketch,) = item_shards(items, 1, 16)
    ledger = PrivacyLedger(Budget(2.0, 1e-5))
    out = release_disjoint([sketch], Budget(1.0, 1e-6), rng=SeededRandomSource(5), ledger=ledger)
    ref = release(sketch, Budget(1.0, 1e-6), rng=SeededRandomSource(5))
    assert out.items == ref.items and out.mechanism == "pmg" and ledger.spent().epsilon == 1.0
