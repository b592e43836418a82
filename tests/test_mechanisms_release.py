"""The release entry point: validity rules, Release records, noise structure, and Monte Carlo checks
that the reported error intervals hold at least as often as stated.

Monte Carlo tests use fixed seeds; each asserts that the number of runs violating the interval is
at most the 1 − 1e-3 quantile of Binomial(R, β), so a mechanism whose bound holds with probability
exactly 1 − β would fail with probability <= 1e-3 (the bounds are union bounds, so in fact far less).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from privstream.accounting import Budget, PrivacyLedger, ZCDPBudget
from privstream.mechanisms import (
    MECHANISMS,
    MechanismNotApplicable,
    applicable_mechanisms,
    calibrate_gshm,
    release,
    release_partitions,
)
from privstream.mechanisms.common import threshold_and_sort
from privstream.mechanisms.pmg import pmg_release
from privstream.noise import SeededRandomSource
from privstream.sketches import (
    Build,
    Dummy,
    ExactHistogram,
    MisraGries,
    PrivacyAwareMisraGries,
    StandardMisraGries,
    item_order_key,
    merge_in_order,
)

BUDGET = Budget(1.0, 1e-3)


def stream(seed: int, n: int = 3000, universe: int = 200) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).zipf(1.5, n) % universe]


def alg1(items: list[int], k: int) -> MisraGries:
    mg = MisraGries(k)
    for x in items:
        mg.update(x)
    return mg


def standard(items: list[int], k: int) -> StandardMisraGries:
    mg = StandardMisraGries(k)
    for x in items:
        mg.update(x)
    return mg


def merged(k: int) -> StandardMisraGries:
    return merge_in_order([standard(stream(s), k) for s in (1, 2, 3)])


def test_pmg_refused_on_merged_and_standard_sketches() -> None:
    with pytest.raises(MechanismNotApplicable, match="merged"):
        release(merged(8), BUDGET, mechanism="pmg")
    with pytest.raises(MechanismNotApplicable, match="Alg. 1"):
        release(standard(stream(1), 8), BUDGET, mechanism="pmg")
    with pytest.raises(MechanismNotApplicable, match="sequentially"):
        release(merged(8), BUDGET, mechanism="pmg_standard")
    batch = MisraGries(8)
    batch.update_batch(stream(4))  # a batch is item by item: still Alg. 1, PMG applies
    assert release(batch, BUDGET, mechanism="pmg").mechanism == "pmg"


@dataclass
class _FakePAMG:
    k: int = 4
    build: Build = Build.PAMG
    m: int | None = None

    def counters(self) -> dict[int, int]:
        return {1: 5}


def test_user_level_release_needs_m() -> None:
    with pytest.raises(MechanismNotApplicable, match="bound m"):
        release(_FakePAMG(), BUDGET, mechanism="gshm")
    with pytest.raises(MechanismNotApplicable, match="bound m"):
        release(_FakePAMG(m=0), BUDGET)
    pamg = PrivacyAwareMisraGries(8, 3)
    rng = np.random.default_rng(5)
    for _ in range(400):
        pamg.update({int(x) for x in rng.zipf(1.5, 3) % 50})
    out = release(pamg, BUDGET, mechanism="gshm", rng=SeededRandomSource(1))
    assert "user" in out.privacy_unit and "user" in out.neighbour_relation
    assert "M/(k+1)" in out.error_bound.sketch_term
    reasons = applicable_mechanisms(pamg, BUDGET)
    assert (
        reasons["pmg"] and reasons["pure_topk"] and not reasons["gshm"] and not reasons["laplace_threshold"]
    )
    other = PrivacyAwareMisraGries(8, 3)
    other.update({1, 2, 3})
    both = merge_in_order([pamg, other])  # Thm 8.12: merged PAMG + GSHM with l = k
    assert both.build is Build.PAMG_MERGED
    out = release(both, BUDGET, rng=SeededRandomSource(2))
    assert out.mechanism in ("gshm", "laplace_threshold") and "user" in out.privacy_unit


def test_pure_dp_needs_domain_and_delta_mechanisms_need_delta() -> None:
    sketch = alg1(stream(1), 8)
    with pytest.raises(MechanismNotApplicable, match="no mechanism applies"):
        release(sketch, Budget(1.0, 0.0))
    with pytest.raises(MechanismNotApplicable, match="delta"):
        release(sketch, Budget(1.0, 0.0), mechanism="gshm")
    with pytest.raises(MechanismNotApplicable, match="domain"):
        release(sketch, BUDGET, mechanism="pure_topk")
    out = release(sketch, Budget(1.0, 0.0), domain=range(200), rng=SeededRandomSource(2))
    assert out.delta == 0.0 and out.mechanism in ("pure_topk", "chan_topk", "chan_pmg")
    # stored keys outside the declared domain are dropped: the release succeeds whatever the data
    clipped = release(
        sketch, Budget(1.0, 0.0), mechanism="pure_topk", domain=range(5, 200), rng=SeededRandomSource(3)
    )
    assert clipped.items and all(5 <= x < 200 for x, _ in clipped.items)
    assert dict(clipped.parameters)["scope"].startswith("declared domain only")
    with pytest.raises(ValueError, match="mechanism"):
        release(sketch, BUDGET, mechanism="nope")
    with pytest.raises(TypeError, match="sketch"):
        release({1: 2}, BUDGET)


@pytest.mark.parametrize("name", MECHANISMS)
def test_release_record(name: str) -> None:
    if name == "exact_threshold":  # the exact-count mechanism: an exact histogram (build EXACT)
        sketch: MisraGries | ExactHistogram = ExactHistogram()
        sketch.update_batch(stream(7))
        limit = len(set(stream(7)))
    else:
        sketch, limit = alg1(stream(7), 16), 16
    out = release(
        sketch, Budget(2.0, 1e-4), mechanism=name, domain=range(200), rng=SeededRandomSource(3), epoch=12
    )
    assert out.mechanism == name and out.epoch == 12 and out.epsilon == 2.0
    assert out.delta == (0.0 if name in ("pure_topk", "chan_topk", "chan_pmg") else 1e-4)
    assert out.privacy_unit == "event" and "add/remove one event" in out.neighbour_relation
    keys = [x for x, _ in out.items]
    assert keys == sorted(keys, key=item_order_key)
    assert not any(isinstance(x, Dummy) for x in keys)
    assert len(keys) <= limit
    # noise on both sides; below also covers a threshold or a key lost to the top k
    assert 0 < out.error_bound.above < out.error_bound.below and out.error_bound.beta == 0.05
    json.dumps(out.to_dict())  # serialisable
    assert 1 in dict(out.items)  # the heaviest item of zipf(1.5) is released by every mechanism here


def test_auto_picks_smallest_error_bound() -> None:
    sketch = alg1(stream(8), 16)
    bounds = {}
    for name, reason in applicable_mechanisms(sketch, BUDGET).items():
        if not reason:
            bounds[name] = release(
                sketch, BUDGET, mechanism=name, rng=SeededRandomSource(1)
            ).error_bound.noise_error
    chosen = release(sketch, BUDGET, rng=SeededRandomSource(1))
    assert bounds[chosen.mechanism] == min(bounds.values())
    assert release(merged(16), BUDGET).mechanism in ("gshm", "laplace_threshold")


def test_pmg_noises_every_slot_with_one_shared_noise() -> None:
    """All k slots (zero-count keys included) get c + η + Z_x: with the threshold disabled every
    slot except dummies is output, and two slots' noises have correlation Var(η)/(2Var(η)) = 1/2.
    Fisher-z 99.9% interval over 3000 runs."""
    slots = [(x, 0) for x in range(6)] + [(Dummy(0), 0), (Dummy(1), 0)]
    rng = SeededRandomSource(9)
    runs = np.array([[v for _, v in pmg_release(slots, 1.0, -(10**9), rng)] for _ in range(3000)])
    assert runs.shape == (3000, 6)  # zero-count keys kept, dummies dropped after thresholding
    r = np.corrcoef(runs[:, 0], runs[:, 1])[0, 1]
    half_width = 3.29 / np.sqrt(3000 - 3)
    assert abs(np.arctanh(r) - np.arctanh(0.5)) < half_width


def test_release_pmg_noises_all_k_slots_of_the_sketch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``release(..., "pmg")`` hands PMG every one of the k slots: real keys, zero-count keys and the
    dummies of a sketch that has not filled up."""
    import importlib

    pmg_module = importlib.import_module("privstream.mechanisms.pmg")  # the registered mechanism's module
    seen: list[list] = []
    real_pmg = pmg_module.pmg_release

    def spy(slots, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(list(slots))
        return real_pmg(slots, *args, **kwargs)

    monkeypatch.setattr(pmg_module, "pmg_release", spy)
    sketch = alg1([1, 1, 2, 3, 4], 6)  # 4 distinct, k = 6: two dummies; no decrement yet
    sketch.update(5)
    sketch.update(6)
    sketch.update(7)  # absent, every counter >= 1: decrement all, 2..6 drop to zero
    release(sketch, BUDGET, mechanism="pmg", rng=SeededRandomSource(2))
    (slots,) = seen
    assert len(slots) == 6 and slots == sketch.slots()
    assert any(c == 0 for _, c in slots)  # zero-count keys are noised too
    fresh = alg1([1], 4)
    release(fresh, BUDGET, mechanism="pmg", rng=SeededRandomSource(2))
    assert len(seen[1]) == 4 and sum(isinstance(x, Dummy) for x, _ in seen[1]) == 3


def test_chan_mechanisms_clamp_select_and_scale() -> None:
    """Chan et al.: chan_pmg adds Geom(exp(ε/(k+1))), keeps values >= 1 (clamp at 0) and at most the
    top k; chan_topk adds Laplace(k/ε) and keeps exactly the top k over the declared domain."""
    sketch = standard(stream(5, n=2000, universe=60), 8)
    heaviest = max(sketch.counters(), key=sketch.counters().get)
    for seed in range(20):
        pmg = release(
            sketch, Budget(1.0), mechanism="chan_pmg", domain=range(60), rng=SeededRandomSource(seed)
        )
        assert dict(pmg.parameters)["scale"] == "9/eps" and len(pmg.items) <= 8
        assert all(v >= 1 for _, v in pmg.items)
        topk = release(
            sketch, Budget(1.0), mechanism="chan_topk", domain=range(60), rng=SeededRandomSource(seed)
        )
        assert dict(topk.parameters)["scale"] == "8/eps" and len(topk.items) == 8
        # the heaviest key (count far above the noise scale) is released by both, every time
        assert heaviest in dict(pmg.items) and heaviest in dict(topk.items)


def test_threshold_is_inclusive_and_dummies_dropped_after() -> None:
    out = threshold_and_sort([("b", 5), (3, 4), (Dummy(0), 9), (2, 5)], 5)
    assert out == ((2, 5), ("b", 5))


def _violations(
    true_counts: Counter, bound_below: float, bound_above: float, releases: list[tuple], universe: range
) -> int:
    bad = 0
    for items in releases:
        got = dict(items)
        for x in universe:
            diff = got.get(x, 0) - true_counts.get(x, 0)
            if diff < -bound_below or diff > bound_above:
                bad += 1
                break
    return bad


@pytest.mark.parametrize(
    ("name", "builder"),
    [
        ("pmg", lambda s: alg1(s, 16)),
        ("pmg_standard", lambda s: standard(s, 16)),
        ("gshm", lambda s: merge_in_order([standard(s[:1500], 16), standard(s[1500:], 16)])),
        ("laplace_threshold", lambda s: merge_in_order([standard(s[:1500], 16), standard(s[1500:], 16)])),
        ("pure_topk", lambda s: alg1(s, 16)),
        ("chan_topk", lambda s: standard(s, 16)),
        ("chan_pmg", lambda s: standard(s, 16)),
    ],
)
def test_error_interval_holds_at_least_as_often_as_stated(name: str, builder) -> None:  # noqa: ANN001
    """Lebeda–Tětek Thm 8 (and its analogues): simultaneously for all x in the universe,
    f(x) − below − n/(k+1) <= f̂(x) <= f(x) + above, with probability >= 1 − β."""
    items = stream(21, n=3000, universe=120)
    sketch = builder(items)
    beta = 0.2
    runs = 300 if name in ("pure_topk", "chan_topk", "chan_pmg") else 1500
    rng = SeededRandomSource(22)
    outs = [
        release(sketch, Budget(1.0, 1e-3), mechanism=name, beta=beta, rng=rng, domain=range(120))
        for _ in range(runs)
    ]
    bound = outs[0].error_bound
    sketch_error = len(items) / (sketch.k + 1)
    bad = _violations(
        Counter(items), bound.below + sketch_error, bound.above, [o.items for o in outs], range(120)
    )
    assert bad <= stats.binom.ppf(1 - 1e-3, runs, beta)
    # the bound is not vacuous: it is smaller than the largest count
    assert bound.noise_error < max(Counter(items).values())


def test_release_partitions() -> None:
    parts = [alg1(stream(s, n=1000, universe=100), 8) for s in (31, 32, 33)]
    out = release_partitions(parts, Budget(1.0), domain=range(100), rng=SeededRandomSource(4))
    assert out.mechanism == "pure_topk" and out.delta == 0.0 and len(out.items) == 8
    assert ("partitions", 3) in out.parameters
    with pytest.raises(MechanismNotApplicable, match="sequentially"):
        release_partitions([merged(8)], Budget(1.0), domain=range(200))


def test_gshm_uses_calibrated_parameters() -> None:
    out = release(merged(8), Budget(1.0, 1e-3), mechanism="gshm", rng=SeededRandomSource(5))
    p = calibrate_gshm(1.0, 1e-3, 8)
    params = dict(out.parameters)
    assert params["sigma2"] == p.sigma2 and params["tau"] == p.tau and params["threshold"] == p.tau + 1
    assert all(v >= p.threshold for _, v in out.items)


def _pamg() -> PrivacyAwareMisraGries:
    pamg = PrivacyAwareMisraGries(8, 3)
    for user in ({1, 2, 3}, {1, 4}, {1, 2}):
        pamg.update(user)
    return pamg


def test_ledger_composition_must_fit_the_privacy_unit_and_is_checked_before_charging() -> None:
    """parallel_epochs = parallel composition over disjoint epochs: only event-level releases that
    carry their epoch; user-level (PAMG) releases need sequential composition."""
    sketch = alg1(stream(2), 8)
    parallel = PrivacyLedger(Budget(1.0, 1e-3), composition="parallel_epochs")
    with pytest.raises(ValueError, match="sequential"):
        release(_pamg(), BUDGET, mechanism="gshm", ledger=parallel, epoch=1)
    with pytest.raises(ValueError, match="epoch"):
        release(sketch, BUDGET, mechanism="pmg", ledger=parallel)
    with pytest.raises(ValueError, match="epoch"):
        release_partitions([sketch], Budget(1.0), domain=range(200), ledger=parallel)
    assert parallel.sequence == 0  # refused before any charge
    release(sketch, BUDGET, mechanism="pmg", ledger=parallel, epoch=1, rng=SeededRandomSource(1))
    release(sketch, BUDGET, mechanism="pmg", ledger=parallel, epoch=2, rng=SeededRandomSource(2))
    assert parallel.sequence == 2 and parallel.head is not None and parallel.head.epoch == 2
    sequential = PrivacyLedger(Budget(2.0, 1e-2))
    out = release(_pamg(), BUDGET, mechanism="gshm", ledger=sequential, rng=SeededRandomSource(3))
    assert "user" in out.privacy_unit and sequential.sequence == 1


def test_zcdp_ledger_is_refused_clearly_before_charging() -> None:
    ledger = PrivacyLedger(ZCDPBudget(1.0))
    with pytest.raises(ValueError, match=r"ZCDPBudget.*\(ε, δ\) Budget total"):
        release(merged(8), BUDGET, mechanism="gshm", ledger=ledger)
    assert ledger.sequence == 0
    with pytest.raises(TypeError, match="ledger"):
        release(merged(8), BUDGET, ledger=object())  # type: ignore[arg-type]


def test_public_parameter_errors_are_raised_before_charging() -> None:
    """Bad domain, rng or epoch fail before the ledger is charged (they used to fail after it)."""
    sketch = alg1(stream(3), 8)
    ledger = PrivacyLedger(Budget(10.0, 1e-2))
    with pytest.raises(ValueError, match="duplicate"):
        release(sketch, Budget(1.0), mechanism="chan_topk", domain=[1, 2, 2], ledger=ledger)
    with pytest.raises(TypeError, match="domain"):
        release(sketch, Budget(1.0), mechanism="pure_topk", domain="abc", ledger=ledger)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rng"):
        release(sketch, BUDGET, mechanism="pmg", rng=7, ledger=ledger)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="epoch"):
        release(sketch, BUDGET, mechanism="pmg", epoch="3", ledger=ledger)  # type: ignore[arg-type]
    assert ledger.sequence == 0


@pytest.mark.parametrize("name", ["pure_topk", "chan_topk", "chan_pmg"])
def test_domain_release_never_depends_on_keys_outside_the_domain(name: str) -> None:
    """A heavy stored str key outside an int domain is dropped (never an error after the charge,
    never echoed): the release succeeds, is charged once, and holds only domain elements."""
    secret = "alice@example.com"
    sketch = alg1([*stream(4, n=600, universe=50), *[secret] * 200], 8)
    assert secret in sketch.counters()
    ledger = PrivacyLedger(Budget(10.0))
    out = release(
        sketch, Budget(1.0), mechanism=name, domain=range(50), ledger=ledger, rng=SeededRandomSource(5)
    )
    assert ledger.sequence == 1 and all(type(x) is int and 0 <= x < 50 for x, _ in out.items)
    assert secret not in json.dumps(out.to_dict())


def test_group_size_calibrates_to_the_one_step_budget_and_charges_the_stated_one() -> None:
    """group_size=2 (replace = remove + add): the noise is that of the Lemma 8.1 one-step budget
    (ε/2, δ/(2e^ε)) — same seed, same output — while the release states and the ledger is
    charged the requested (ε, δ)."""
    import math

    from privstream.accounting import Budget, PrivacyLedger
    from privstream.mechanisms import release
    from privstream.noise import SeededRandomSource
    from privstream.sketches import MisraGries

    sketch = MisraGries(8)
    sketch.update_batch([1] * 400 + [2] * 250 + list(range(3, 60)))
    ledger = PrivacyLedger(Budget(4.0, 1e-4), composition="parallel_epochs")
    grouped = release(
        sketch, Budget(1.0, 1e-6), rng=SeededRandomSource(5), epoch=0, ledger=ledger, group_size=2
    )
    inner = release(
        sketch, Budget(0.5, 1e-6 / (2 * math.e)), rng=SeededRandomSource(5), mechanism=grouped.mechanism
    )
    assert grouped.items == inner.items
    assert (grouped.epsilon, grouped.delta) == (1.0, 1e-6)
    assert ledger.spent() == Budget(1.0, 1e-6)
    assert "group privacy" in grouped.neighbour_relation
    assert grouped.error_bound == inner.error_bound
    with pytest.raises(ValueError, match="group_size"):
        release(sketch, Budget(1.0, 1e-6), group_size=0)
