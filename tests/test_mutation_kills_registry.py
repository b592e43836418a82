"""The privacy map of every mechanism, its one-step calibration and the refusals of the registry
(:mod:`privstream.mechanisms.registry`), each against the paper's formula written out here.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py registry``).

* Group privacy (Lebeda–Tětek Lemma 8.1): a mechanism that is (ε, δ)-DP for one step of its
  neighbour relation is (d·ε, d·e^{dε}·δ)-DP for inputs d steps apart. The expected values are
  computed in the test from that formula: at d = 1 the map is the identity (δ unchanged, not
  1·e^ε·δ), at d = 2 it is (2ε, 2e^{2ε}δ); pure maps (and δ = 0) keep δ = 0 at any d. Where the
  formula's δ reaches 1 — also exactly 1.0 (ε = 0, d = 2, δ = 1/2) — the map answers
  :class:`NoGuarantee` (d, d·ε, the formula's δ), never a Budget; where d·ε is not a finite float
  (or d >= 2^1000, which a float cannot hold) or d·ε >= 700 (the code's margin below e^{dε}'s
  overflow at ~709.78; conservative: no guarantee is stated) it answers NoGuarantee with δ = inf.
  ``d_in`` is a positive int (ValueError otherwise, also for bool and float).
* ``covers``: the map at d is within the stated budget up to a relative tolerance of 1e-9, checked
  on both sides (1 + 0.5e-9 accepted, 1 + 2e-9 refused) for ε and δ separately; NoGuarantee
  never covers.
* ``charged``: what a release states and the ledger is charged — (ε, 0) for a pure mechanism,
  (ε, δ) for an (ε, δ) one. Checked at the ledger entry and on the release for every registered
  mechanism (PMG, PMG-standard, GSHM, thresholded Laplace, exact threshold: δ charged; pure_topk,
  chan_topk, chan_pmg: δ = 0), with group_size 1 and 2 (the stated budget, not the one-step one,
  is charged), against the hand-written table of the papers' guarantees.
* ``one_step_budget`` (Lemma 8.1 inverted): ε' = ε/g, δ' = δ/(g·e^ε), the identity at g = 1;
  mapped back over g steps it gives the stated budget.
* ``Mechanism.refusal``, in order: ε > 0; δ > 0 for an (ε, δ) mechanism (``needs_delta`` = not
  pure); a declared domain for a domain-wide one; the build structure its theorem needs (e.g. PMG
  refused on merged and standard sketches) — checked on test mechanisms whose flags are set one at
  a time, with the exact reason strings, and on the registered PMG/GSHM/pure_topk.

Deterministic: no randomness except seeded sources for the releases.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privstream.accounting import Budget, PrivacyLedger
from privstream.mechanisms import MechanismNotApplicable, get, release
from privstream.mechanisms.registry import (
    Calibration,
    Mechanism,
    NoGuarantee,
    PrivacyMap,
    Structure,
    counters_of,
    one_step_budget,
)
from privstream.noise import SeededRandomSource
from privstream.sketches import Build, ExactHistogram, MisraGries, StandardMisraGries, merge_in_order

APPROX = PrivacyMap(pure=False, theorem="t")
PURE = PrivacyMap(pure=True, theorem="t")


def lemma_8_1(epsilon: float, delta: float, d: int) -> tuple[float, float]:
    """Group privacy, Lebeda–Tětek Lemma 8.1, written out: (d·ε, d·e^{dε}·δ)."""
    return d * epsilon, d * math.exp(d * epsilon) * delta


# ------------------------------------------------------------------------------- group privacy


@pytest.mark.parametrize(("epsilon", "delta"), [(0.5, 1e-6), (1.3, 2e-9), (0.1, 0.01)])
def test_one_step_map_is_the_identity_for_approximate_and_drops_delta_for_pure(
    epsilon: float, delta: float
) -> None:
    one = Budget(epsilon, delta)
    assert APPROX(one) == Budget(epsilon, delta)
    assert APPROX(one, 1) == Budget(epsilon, delta)  # not (ε, 1·e^ε·δ)
    assert PURE(one, 1) == Budget(epsilon, 0.0)


@pytest.mark.parametrize("d", [2, 3, 7])
@pytest.mark.parametrize(("epsilon", "delta"), [(0.5, 1e-6), (0.25, 3e-5), (1.0, 1e-9)])
def test_group_privacy_is_lemma_8_1(d: int, epsilon: float, delta: float) -> None:
    want_eps, want_delta = lemma_8_1(epsilon, delta, d)
    assert want_delta < 1
    got = APPROX(Budget(epsilon, delta), d)
    assert isinstance(got, Budget)
    assert got.epsilon == pytest.approx(want_eps, rel=1e-12)
    assert got.delta == pytest.approx(want_delta, rel=1e-12)
    # pure ε-DP (or an (ε, 0) calibration): δ stays 0, ε grows d-fold
    for zero in (PURE(Budget(epsilon, delta), d), APPROX(Budget(epsilon, 0.0), d)):
        assert isinstance(zero, Budget) and zero.delta == 0.0
        assert zero.epsilon == pytest.approx(want_eps, rel=1e-12)


def test_delta_reaching_exactly_one_is_no_guarantee() -> None:
    """ε = 0, d = 2, δ = 1/2: the formula's δ is exactly 1.0 (a Budget refuses δ >= 1)."""
    assert lemma_8_1(0.0, 0.5, 2) == (0.0, 1.0)
    assert APPROX(Budget(0.0, 0.5), 2) == NoGuarantee(2, 0.0, 1.0)
    # just below 1 it is still a Budget with the formula's δ
    below = APPROX(Budget(0.0, 0.4999), 2)
    assert isinstance(below, Budget) and below.delta == pytest.approx(0.9998, rel=1e-12)
    # ε > 0: the first d whose δ reaches 1, and the one before it
    one = Budget(0.5, 1e-3)
    d = next(d for d in range(1, 100) if lemma_8_1(0.5, 1e-3, d)[1] >= 1)
    eps, delta = lemma_8_1(0.5, 1e-3, d)
    got = APPROX(one, d)
    assert isinstance(got, NoGuarantee)
    assert (got.d_in, got.epsilon) == (d, eps) and got.delta_bound == pytest.approx(delta, rel=1e-12)
    before = APPROX(one, d - 1)
    assert isinstance(before, Budget)
    assert before.delta == pytest.approx(lemma_8_1(0.5, 1e-3, d - 1)[1], rel=1e-12)
    assert not APPROX.covers(one, d, Budget(1e6, 0.999))
    assert PURE(one, d) == Budget(d * 0.5, 0.0)  # pure: δ never grows


def test_no_guarantee_where_d_epsilon_or_e_to_the_d_epsilon_overflows() -> None:
    # d·ε past the largest float: no finite ε to state (pure and approximate alike)
    assert PURE(Budget(1e308), 10) == NoGuarantee(10, math.inf, math.inf)
    assert APPROX(Budget(1e308, 1e-9), 10) == NoGuarantee(10, math.inf, math.inf)
    assert APPROX(Budget(1e308, 0.0), 2) == NoGuarantee(2, math.inf, math.inf)
    # a d that a float cannot hold (>= 2^1000), even with a tiny ε
    assert PURE(Budget(1e-300), 2**1000) == NoGuarantee(2**1000, math.inf, math.inf)
    assert isinstance(PURE(Budget(1e-300), 2**1000 - 1), Budget)
    assert APPROX(Budget(1.0, 1e-9), 10**400) == NoGuarantee(10**400, math.inf, math.inf)
    # e^{dε} is taken to overflow from d·ε = 700 on (a margin below ~709.78): δ = inf, no guarantee,
    # although the formula gives a tiny δ here (conservative: nothing is stated)
    assert lemma_8_1(350.0, 1e-310, 2)[1] < 1
    assert APPROX(Budget(350.0, 1e-310), 2) == NoGuarantee(2, 700.0, math.inf)
    assert APPROX(Budget(1.0, 1e-9), 1000) == NoGuarantee(1000, 1000.0, math.inf)
    assert APPROX(Budget(800.0, 1e-9), 2) == NoGuarantee(2, 1600.0, math.inf)
    # just below 700 the formula applies
    got = APPROX(Budget(349.5, 1e-310), 2)
    assert isinstance(got, Budget) and got.epsilon == 699.0
    assert got.delta == pytest.approx(lemma_8_1(349.5, 1e-310, 2)[1], rel=1e-9)
    # δ = 0 (approximate map): nothing to multiply, (dε, 0) at any finite dε
    assert APPROX(Budget(400.0, 0.0), 2) == Budget(800.0, 0.0)
    assert PURE(Budget(400.0, 1e-9), 2) == Budget(800.0, 0.0)


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "2", None])
def test_d_in_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="^d_in: must be an int >= 1"):
        APPROX(Budget(1.0, 1e-6), bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^d_in: "):
        PURE.covers(Budget(1.0), bad, Budget(1.0))  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------- covers


@pytest.mark.parametrize("d", [1, 2])
def test_covers_has_a_relative_tolerance_of_1e_9_on_each_side(d: int) -> None:
    one = Budget(0.5, 1e-6)
    mapped = APPROX(one, d)
    assert isinstance(mapped, Budget)
    eps, delta = mapped.epsilon, mapped.delta

    def covers(e: float, dl: float) -> bool:
        return APPROX.covers(one, d, Budget(e, dl))

    assert covers(eps, delta)  # exactly the map
    # the map slightly above the budget, within 1e-9: covered (rounding of the inversion)
    assert covers(eps / (1 + 0.5e-9), delta)
    assert covers(eps, delta / (1 + 0.5e-9))
    # beyond the tolerance, on either parameter: not covered
    assert not covers(eps / (1 + 2e-9), delta)
    assert not covers(eps, delta / (1 + 2e-9))
    assert not covers(eps * 0.9, delta * 10)
    assert not covers(eps * 10, delta * 0.9)
    # a larger budget is covered
    assert covers(eps * 10, delta * 10)
    # the boundary itself: the map exactly at budget·(1 + 1e-9) is covered (<=, not <)
    tol = 1 + 1e-9
    at_eps = _below_boundary(eps, tol)
    at_delta = _below_boundary(delta, tol)
    assert at_eps * tol == eps and at_delta * tol == delta
    assert covers(at_eps, delta) and covers(eps, at_delta) and covers(at_eps, at_delta)
    assert not covers(math.nextafter(at_eps, 0), delta)
    assert not covers(eps, math.nextafter(at_delta, 0))


def _below_boundary(value: float, tol: float) -> float:
    """A float b with b·tol == value exactly (rounded), the smallest such b found near value/tol."""
    b = value / tol
    while b * tol < value:
        b = math.nextafter(b, math.inf)
    while math.nextafter(b, 0) * tol == value:
        b = math.nextafter(b, 0)
    assert b * tol == value, value
    return b


def test_covers_uses_the_map_at_d_in() -> None:
    one = Budget(0.5, 1e-6)
    eps2, delta2 = lemma_8_1(0.5, 1e-6, 2)
    assert APPROX.covers(one, 2, Budget(eps2, delta2))
    assert not APPROX.covers(one, 2, Budget(0.5, 1e-6))  # the one-step budget does not cover 2 steps
    assert APPROX.covers(one, 1, Budget(0.5, 1e-6))
    assert not APPROX.covers(one, 1, Budget(0.5, 0.9e-6))
    # pure: δ = 0 is covered by a pure budget at any d
    assert PURE.covers(one, 3, Budget(1.5, 0.0))
    # zero on both sides is covered (0 <= 0·tol): ε = 0 and δ = 0
    assert APPROX.covers(Budget(0.0, 1e-6), 1, Budget(0.0, 1e-6))
    assert APPROX.covers(Budget(0.5, 0.0), 2, Budget(1.0, 0.0))
    assert not PURE.covers(one, 3, Budget(1.4, 0.0))
    # no guarantee covers nothing
    assert APPROX(Budget(0.0, 0.5), 2) == NoGuarantee(2, 0.0, 1.0)
    assert not APPROX.covers(Budget(0.0, 0.5), 2, Budget(1.0, 0.999999))
    assert not PURE.covers(Budget(1e308), 10, Budget(1e308, 0.5))


# ---------------------------------------------------------------------------- one_step_budget


@pytest.mark.parametrize("g", [2, 3, 10])
@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-6), (0.3, 1e-9), (2.5, 0.0)])
def test_one_step_budget_is_lemma_8_1_inverted(g: int, epsilon: float, delta: float) -> None:
    step = one_step_budget(Budget(epsilon, delta), g)
    assert step.epsilon == pytest.approx(epsilon / g, rel=1e-15)
    assert step.delta == pytest.approx(delta / (g * math.exp(epsilon)), rel=1e-12, abs=0.0)
    back = APPROX(step, g)
    assert isinstance(back, Budget)
    assert back.epsilon == pytest.approx(epsilon, rel=1e-12)
    assert back.delta == pytest.approx(delta, rel=1e-12, abs=0.0)
    assert APPROX.covers(step, g, Budget(epsilon, delta))


def test_one_step_budget_at_one_step_is_the_budget() -> None:
    budget = Budget(1.5, 1e-6)
    assert one_step_budget(budget, 1) == Budget(1.5, 1e-6)  # not δ/e^ε
    assert one_step_budget(Budget(0.7), 1) == Budget(0.7, 0.0)


# ------------------------------------------------------------------- charged: at the ledger

#: the papers' guarantee kind per registered mechanism (True: pure ε-DP, δ = 0 charged)
PURE_MECHANISMS = {
    "pmg": False,
    "pmg_standard": False,
    "gshm": False,
    "laplace_threshold": False,
    "exact_threshold": False,
    "pure_topk": True,
    "chan_topk": True,
    "chan_pmg": True,
}
DOMAIN = range(60)


def _sketch(name: str) -> object:
    items = [int(x) for x in np.random.default_rng(3).zipf(1.4, 1500) % 60]
    if name == "exact_threshold":
        sketch: object = ExactHistogram()
    else:
        sketch = MisraGries(8)
    sketch.update_batch(items)  # type: ignore[attr-defined]
    return sketch


def test_charged_is_delta_zero_for_pure_maps_only() -> None:
    budget = Budget(0.8, 1e-5)
    assert PURE.charged(budget) == Budget(0.8, 0.0)
    assert APPROX.charged(budget) == Budget(0.8, 1e-5)
    assert APPROX.charged(Budget(0.8)) == Budget(0.8, 0.0)


@pytest.mark.parametrize("group_size", [1, 2])
@pytest.mark.parametrize("name", sorted(PURE_MECHANISMS))
def test_the_ledger_is_charged_and_the_release_states_the_exact_budget(name: str, group_size: int) -> None:
    mech = get(name)
    pure = PURE_MECHANISMS[name]
    assert mech.privacy.pure is pure and mech.needs_delta is (not pure)
    budget = Budget(0.75, 2e-6)
    want = Budget(0.75, 0.0) if pure else Budget(0.75, 2e-6)
    ledger = PrivacyLedger(Budget(10.0, 0.1))
    out = release(
        _sketch(name),
        budget,
        mechanism=name,
        domain=DOMAIN if mech.needs_domain else None,
        ledger=ledger,
        rng=SeededRandomSource(7),
        group_size=group_size,
    )
    assert ledger.sequence == 1
    entry = ledger.head
    assert entry is not None and entry.mechanism == name
    assert entry.budget == want  # the stated budget, never the one-step calibration
    assert ledger.spent() == want
    assert (out.epsilon, out.delta) == (want.epsilon, want.delta)
    kind = "ε-DP (pure), ε=0.75" if pure else "(ε, δ)-DP, ε=0.75, δ=2e-06"
    assert out.statement.startswith(kind)
    # the map at g steps of the one-step calibration is what is stated
    stated = mech.privacy(one_step_budget(budget, group_size), group_size)
    assert isinstance(stated, Budget)
    assert stated.epsilon == pytest.approx(0.75, rel=1e-12)
    assert stated.delta == pytest.approx(want.delta, rel=1e-12, abs=0.0)


def test_gshm_and_pmg_charge_delta_on_merged_and_standard_sketches() -> None:
    a, b = MisraGries(8), StandardMisraGries(8)
    items = [int(x) for x in np.random.default_rng(5).zipf(1.4, 800) % 40]
    a.update_batch(items)
    for x in items:
        b.update(x)
    ledger = PrivacyLedger(Budget(10.0, 0.1))
    release(
        merge_in_order([a, b]), Budget(1.0, 1e-6), mechanism="gshm", ledger=ledger, rng=SeededRandomSource(1)
    )
    assert ledger.head is not None and ledger.head.budget == Budget(1.0, 1e-6)
    release(b, Budget(0.5, 3e-7), mechanism="pmg_standard", ledger=ledger, rng=SeededRandomSource(2))
    assert ledger.head.budget == Budget(0.5, 3e-7)
    assert ledger.spent().epsilon == pytest.approx(1.5) and ledger.spent().delta == pytest.approx(1.3e-6)


# --------------------------------------------------------------------------------------- refusal


def _mechanism(*, pure: bool, needs_domain: bool, builds: set[Build]) -> Mechanism:
    def calibrate(request: object) -> Calibration:
        raise AssertionError("refusal must not calibrate")

    def sample(*args: object) -> tuple:
        raise AssertionError("refusal must not sample")

    return Mechanism(
        name="probe",
        title="Probe",
        structure=Structure(lambda g: any(g is b.guarantees for b in builds), "a probe build", " (hint)"),
        calibrate=calibrate,
        sample=sample,
        privacy=PrivacyMap(pure=pure, theorem="t"),
        needs_domain=needs_domain,
    )


EPS_REASON = "budget.epsilon must be > 0 for a release"
DELTA_REASON = "probe is (ε, δ)-DP and needs delta > 0; use pure_topk/chan_* with a domain"
DOMAIN_REASON = "probe adds noise to every element of a declared universe: pass domain="


def _structure_reason(build: Build) -> str:
    return f"probe (Probe) needs a probe build; this one is {build.name} (hint)"


def test_refusal_checks_epsilon_delta_domain_structure_in_order() -> None:
    alg1, merged = Build.ALG1_SEQUENTIAL, Build.MERGED
    approx = _mechanism(pure=False, needs_domain=True, builds={alg1})
    assert approx.needs_delta is True
    dom = range(10)
    assert approx.refusal(alg1, Budget(0.5, 1e-6), dom) is None
    assert approx.refusal(alg1, Budget(1.5, 1e-6), dom) is None  # any ε > 0, not only ε <= 1
    assert approx.refusal(alg1, Budget(1e-12, 1e-12), dom) is None
    assert approx.refusal(alg1, Budget(0.0, 1e-6), dom) == EPS_REASON
    assert approx.refusal(merged, Budget(0.0, 0.0), None) == EPS_REASON  # ε first
    assert approx.refusal(alg1, Budget(0.5, 0.0), dom) == DELTA_REASON
    assert approx.refusal(merged, Budget(0.5, 0.0), None) == DELTA_REASON  # δ before domain and structure
    assert approx.refusal(alg1, Budget(0.5, 0.5), dom) is None  # any δ in (0, 1)
    assert approx.refusal(alg1, Budget(0.5, 1e-6), None) == DOMAIN_REASON
    assert approx.refusal(merged, Budget(0.5, 1e-6), None) == DOMAIN_REASON  # domain before structure
    assert approx.refusal(merged, Budget(0.5, 1e-6), dom) == _structure_reason(merged)

    pure = _mechanism(pure=True, needs_domain=False, builds={merged, alg1})
    assert pure.needs_delta is False
    assert pure.refusal(alg1, Budget(0.5, 0.0), None) is None  # pure: δ = 0 is fine, no domain needed
    assert pure.refusal(merged, Budget(0.5, 1e-6), range(5)) is None
    assert pure.refusal(Build.PAMG, Budget(0.5, 0.0), None) == _structure_reason(Build.PAMG)
    assert pure.refusal(alg1, Budget(0.0, 0.0), None) == EPS_REASON


def test_registered_mechanisms_refuse_what_their_theorem_does_not_cover() -> None:
    pmg, gshm, pure_topk = get("pmg"), get("gshm"), get("pure_topk")
    ok = Budget(1.0, 1e-6)
    assert pmg.refusal(Build.ALG1_SEQUENTIAL, ok, None) is None
    for build in (Build.MERGED, Build.STANDARD_SEQUENTIAL):
        reason = pmg.refusal(build, ok, None)
        assert reason is not None and reason.startswith("pmg (") and f"this one is {build.name}" in reason
    assert pmg.refusal(Build.ALG1_SEQUENTIAL, Budget(1.0), None) == (
        "pmg is (ε, δ)-DP and needs delta > 0; use pure_topk/chan_* with a domain"
    )
    assert gshm.refusal(Build.MERGED, ok, None) is None
    assert gshm.refusal(Build.MERGED, Budget(1.0), range(5)) == (
        "gshm is (ε, δ)-DP and needs delta > 0; use pure_topk/chan_* with a domain"
    )
    assert pure_topk.refusal(Build.ALG1_SEQUENTIAL, Budget(1.0), range(5)) is None
    assert pure_topk.refusal(Build.ALG1_SEQUENTIAL, Budget(1.0), None) == (
        "pure_topk adds noise to every element of a declared universe: pass domain="
    )
    assert gshm.refusal(Build.MERGED, Budget(0.0, 1e-6), None) == EPS_REASON
    # through release: refused before the ledger is charged, with the same reason
    ledger = PrivacyLedger(Budget(10.0, 0.1))
    with pytest.raises(MechanismNotApplicable, match=r"^pmg is \(ε, δ\)-DP and needs delta > 0"):
        release(_sketch("pmg"), Budget(1.0), mechanism="pmg", ledger=ledger)
    assert ledger.sequence == 0


def test_counters_of_is_the_sketch_counters() -> None:
    sketch = _sketch("pmg")
    assert counters_of(sketch) == sketch.counters()  # type: ignore[attr-defined]
