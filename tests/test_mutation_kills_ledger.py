"""Mutation kills for the privacy ledger and budgets (issue 23, unit ``ledger``).

Each test pins behaviour a surviving mutant changed: the exact running totals after every charge,
refusal exactly at the boundary, exact Fraction arithmetic, the chain checks of ``apply``, the
fail-closed loading of stored states, the budget conversions (written independently here) and the
parameter names in validation messages.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from fractions import Fraction

import pytest

from privstream.accounting import (
    Budget,
    BudgetExceeded,
    LedgerEntry,
    LedgerFormatError,
    PrivacyLedger,
    RunningTotals,
    ZCDPBudget,
    compose_parallel,
    compose_sequential,
    dp_to_zcdp,
    is_parallel,
    most_advanced,
    parallel_epochs,
    pure_dp_to_zcdp,
    zcdp_to_dp,
)
from privstream.accounting.budget import budget_from_dict, exact_value
from privstream.accounting.ledger import genesis_hash, valid_composition

F = Fraction
Z2 = (F(0), F(0))


def _sha(body: dict) -> str:
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    ).hexdigest()


def _sealed(body: dict) -> str:
    """A state body (without checksum) as JSON with a valid checksum: an edit by someone who also
    recomputed the checksum."""
    body = {k: v for k, v in body.items() if k != "checksum"}
    return json.dumps({**body, "checksum": _sha(body)}, sort_keys=True)


def _rehash(entry: dict) -> dict:
    """An entry dict with its own hash recomputed."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return {**body, "hash": _sha(body)}


def _v1_state(entries: list[dict], *, kind: str = "dp") -> tuple[str, str]:
    total = {"kind": "dp", "epsilon": 1.0, "delta": 1e-6} if kind == "dp" else {"kind": "zcdp", "rho": 1.0}
    body = {
        "format": "privstream-ledger",
        "version": 1,
        "ledger_id": "old",
        "total": total,
        "composition": "parallel_epochs",
        "entries": entries,
    }
    checksum = _sha(body)
    return json.dumps({**body, "checksum": checksum}), checksum


def _v1_entry(seq: int, epoch: object, eps: float = 0.1) -> dict:
    return {
        "seq": seq,
        "budget": {"kind": "dp", "epsilon": eps, "delta": 1e-7},
        "mechanism": "pmg",
        "epoch": epoch,
        "label": "",
    }


# ---- budgets and conversions ----------------------------------------------------------------------


def test_conversions_against_their_formulas() -> None:
    rho, delta = 0.5, 1e-6
    big_l = math.log(1 / delta)
    expect = rho + 2 * math.sqrt(rho * big_l)  # Bun–Steinke Prop. 1.3
    for given in (rho, ZCDPBudget(rho)):
        out = zcdp_to_dp(given, delta)
        assert type(out) is Budget
        assert out.epsilon == pytest.approx(expect, rel=1e-12)
        assert out.delta == delta
    # ε-DP ⇒ (ε²/2)-zCDP
    assert pure_dp_to_zcdp(0.6).rho == pytest.approx(0.18, rel=1e-12)
    assert pure_dp_to_zcdp(2).rho == 2.0
    # the ρ with ρ + 2√(ρL) = ε: (√(L+ε) − √L)²
    for d in (1e-6, 1e-9):
        ld = math.log(1 / d)
        want = (math.sqrt(ld + 1.0) - math.sqrt(ld)) ** 2
        assert dp_to_zcdp(1.0, d).rho == pytest.approx(want, rel=1e-12)
    l6, l9 = math.log(1e6), math.log(1e9)
    at6 = (math.sqrt(l6 + 1.0) - math.sqrt(l6)) ** 2
    at9 = (math.sqrt(l9 + 1.0) - math.sqrt(l9)) ** 2
    assert dp_to_zcdp(Budget(1.0, 1e-6)).rho == pytest.approx(at6, rel=1e-12)  # the budget's own δ
    assert dp_to_zcdp(Budget(1.0, 1e-6), 1e-9).rho == pytest.approx(at9, rel=1e-12)  # δ given wins
    assert dp_to_zcdp(Budget(1.0, 1e-6), None).rho == pytest.approx(at6, rel=1e-12)
    with pytest.raises(ValueError, match="^delta is required$"):
        dp_to_zcdp(1.0)
    with pytest.raises(ValueError, match=r"^delta must be > 0 and finite, got 0.0$"):
        dp_to_zcdp(Budget(1.0, 0.0))


def test_conversion_and_budget_messages_name_the_parameter() -> None:
    cases = [
        (lambda: zcdp_to_dp(-0.5, 1e-6), ValueError, r"^rho must be >= 0 and finite, got -0.5$"),
        (lambda: zcdp_to_dp("x", 1e-6), TypeError, r"^rho must be a real number, not str$"),
        (lambda: zcdp_to_dp(0.5, 0.0), ValueError, r"^delta must be > 0 and finite, got 0.0$"),
        (lambda: zcdp_to_dp(0.5, 1.0), ValueError, r"^delta must be < 1.0, got 1.0$"),
        (lambda: dp_to_zcdp(-1.0, 1e-6), ValueError, r"^epsilon must be >= 0 and finite, got -1.0$"),
        (lambda: dp_to_zcdp("1", 1e-6), TypeError, r"^epsilon must be a real number, not str$"),
        (lambda: pure_dp_to_zcdp(-1.0), ValueError, r"^epsilon must be >= 0 and finite, got -1.0$"),
        (lambda: pure_dp_to_zcdp(None), TypeError, r"^epsilon must be a real number, not NoneType$"),
        (lambda: ZCDPBudget(-1.0), ValueError, r"^rho must be >= 0 and finite, got -1.0$"),
        (lambda: ZCDPBudget(True), TypeError, r"^rho must be a real number, not bool$"),
        (lambda: ZCDPBudget(math.inf), ValueError, r"^rho must be >= 0 and finite, got inf$"),
        (lambda: Budget(-1.0), ValueError, r"^epsilon must be >= 0 and finite, got -1.0$"),
        (lambda: Budget(math.nan), ValueError, r"^epsilon must be >= 0 and finite, got nan$"),
        (lambda: Budget("1"), TypeError, r"^epsilon must be a real number, not str$"),
        (lambda: Budget(1.0, -1e-9), ValueError, r"^delta must be >= 0 and finite, got -1e-09$"),
        (lambda: Budget(1.0, 1.0), ValueError, r"^delta must be < 1.0, got 1.0$"),
        (lambda: Budget(1.0, False), TypeError, r"^delta must be a real number, not bool$"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()


def test_budgets_store_floats_and_exact_decimals() -> None:
    z = ZCDPBudget(1)
    assert type(z.rho) is float and z.rho == 1.0
    q = ZCDPBudget(F(1, 4))
    assert type(q.rho) is float and q.rho == 0.25 and q.exact == (F(1, 4),)
    assert vars(z) == {"rho": 1.0}
    b = Budget(2, F(1, 10))
    assert type(b.epsilon) is float and type(b.delta) is float and (b.epsilon, b.delta) == (2.0, 0.1)
    assert Budget(0.1, 1e-7).exact == (F(1, 10), F(1, 10**7))
    assert Budget(0.0).exact == Z2 and Budget(0.0) == Budget(0.0, 0.0)
    assert exact_value(0.1) == F(1, 10) and exact_value(3) == F(3) and exact_value(F(2, 7)) == F(2, 7)
    assert exact_value(0.30000000000000004) == F(30000000000000004, 10**17)


def test_budget_from_dict_both_kinds() -> None:
    z = budget_from_dict({"kind": "zcdp", "rho": 0.75})
    assert type(z) is ZCDPBudget and z.rho == 0.75
    assert budget_from_dict(ZCDPBudget(0.2).to_dict()) == ZCDPBudget(0.2)
    assert budget_from_dict(Budget(0.5, 1e-7).to_dict()) == Budget(0.5, 1e-7)
    with pytest.raises(ValueError, match=r"^unknown budget kind 'ZCDP'$"):
        budget_from_dict({"kind": "ZCDP", "rho": 0.75})
    with pytest.raises(ValueError, match=r"^unknown budget kind None$"):
        budget_from_dict({"rho": 0.75})


def test_composition_exact() -> None:
    assert compose_sequential([Budget(0.1, 1e-7)] * 10) == Budget(1.0, 1e-6)
    assert compose_sequential([ZCDPBudget(0.1)] * 3) == ZCDPBudget(0.3)
    assert compose_sequential([Budget(0.25)]) == Budget(0.25)
    assert compose_parallel([Budget(0.3, 1e-7), Budget(0.2, 1e-6)]) == Budget(0.3, 1e-6)
    assert compose_parallel([ZCDPBudget(0.1), ZCDPBudget(0.4), ZCDPBudget(0.2)]) == ZCDPBudget(0.4)
    for compose in (compose_sequential, compose_parallel):
        with pytest.raises(ValueError, match="^budgets must not be empty$"):
            compose([])
        with pytest.raises(TypeError, match="convert first"):
            compose([ZCDPBudget(0.1), Budget(0.1)])


# ---- compositions and running totals --------------------------------------------------------------


def test_composition_names() -> None:
    assert parallel_epochs("time:60000ms") == "parallel_epochs/time:60000ms"
    for bad in ("", "a\nb", 5):
        with pytest.raises(ValueError, match="^partition must be a non-empty printable string"):
            parallel_epochs(bad)  # type: ignore[arg-type]
    assert is_parallel("parallel_epochs") and is_parallel("parallel_epochs/count:10")
    assert not is_parallel("sequential") and not is_parallel("parallel_epochsX")
    good = ("sequential", "parallel_epochs", "parallel_epochs/count:1000")
    bad_ones = (
        None,
        3,
        "",
        "advanced",
        "parallel_epochs/",
        "parallel_epochs/a\tb",
        "sequential/x",
        "parallel_epochsX/a",
    )
    assert all(valid_composition(c) for c in good)
    assert not any(valid_composition(c) for c in bad_ones)
    for c in good:
        assert PrivacyLedger(Budget(1.0), composition=c).composition == c
    # a partition may itself contain "/": only the first one separates the rule
    nested = parallel_epochs("time:60000ms/offset:5")
    assert (
        nested == "parallel_epochs/time:60000ms/offset:5"
        and valid_composition(nested)
        and is_parallel(nested)
    )
    assert PrivacyLedger(Budget(1.0), composition=nested).composition == nested
    assert not valid_composition("sequential/parallel_epochs/x")
    for c in bad_ones:
        with pytest.raises(ValueError, match="^composition must be one of"):
            PrivacyLedger(Budget(1.0), composition=c)  # type: ignore[arg-type]


def test_running_totals_after_each_rule() -> None:
    zero = RunningTotals.zero(2)
    assert zero == RunningTotals(Z2, Z2, None, Z2) and zero.spent() == Z2
    assert RunningTotals.zero(1) == RunningTotals((F(0),), (F(0),), None, (F(0),))
    a, b, c = (F(1, 2), F(1, 10)), (F(1, 4), F(3, 10)), (F(1, 8), F(0))
    # sequential: every charge (with or without an epoch) adds to everywhere
    seq = zero.after(a, 5, "sequential").after(b, None, "sequential").after(c, 2, "sequential")
    assert seq == RunningTotals((F(7, 8), F(2, 5)), Z2, None, Z2)
    assert seq.spent() == (F(7, 8), F(2, 5))
    par = "parallel_epochs/time:1ms"
    t1 = zero.after(a, 3, par)  # the first epoch starts
    assert t1 == RunningTotals(Z2, Z2, 3, a)
    t2 = t1.after(b, 3, par)  # same epoch: sequential within it
    assert t2 == RunningTotals(Z2, Z2, 3, (F(3, 4), F(2, 5)))
    t3 = t2.after(c, 4, par)  # a new epoch: the old one's sum goes into closed_max
    assert t3 == RunningTotals(Z2, (F(3, 4), F(2, 5)), 4, c)
    assert t3.spent() == (F(3, 4), F(2, 5))
    t4 = t3.after(b, None, par)  # an epoch-less charge covers every epoch
    assert t4 == RunningTotals(b, (F(3, 4), F(2, 5)), 4, c)
    assert t4.spent() == (F(1), F(7, 10))
    t5 = t4.after(c, 1, par)  # an earlier epoch: composed on top of the worst epoch so far
    assert t5 == RunningTotals(b, (F(7, 8), F(2, 5)), 4, c)
    assert t5.spent() == (F(9, 8), F(7, 10))
    t6 = t5.after((F(1), F(1, 2)), 9, par)  # componentwise max of closed_max and current
    assert t6 == RunningTotals(b, (F(7, 8), F(2, 5)), 9, (F(1), F(1, 2)))
    assert t6.spent() == (F(5, 4), F(4, 5))
    # componentwise spent: everywhere + max(closed_max, current) per component
    mixed = RunningTotals((F(1), F(2)), (F(3), F(1)), 0, (F(1), F(5)))
    assert mixed.spent() == (F(4), F(7))
    # epoch 0 is an epoch (not "no epoch"), and negative epochs order as ints
    assert zero.after(a, 0, "parallel_epochs") == RunningTotals(Z2, Z2, 0, a)
    neg = zero.after(a, -2, "parallel_epochs").after(b, -1, "parallel_epochs")
    assert neg == RunningTotals(Z2, a, -1, b)


def test_totals_of_another_width_are_refused() -> None:
    """Amounts of different widths ((ε, δ) against ρ) never compose silently."""
    two, one = RunningTotals.zero(2), RunningTotals.zero(1)
    with pytest.raises(ValueError):
        two.after((F(1),), None, "sequential")
    with pytest.raises(ValueError):
        two.after((F(1), F(0), F(0)), None, "sequential")
    with pytest.raises(ValueError):
        one.after((F(1),), 3, "parallel_epochs").after((F(1), F(0)), 3, "parallel_epochs")
    with pytest.raises(ValueError):
        RunningTotals((F(1), F(0)), (F(1),), 3, (F(1), F(0))).spent()
    with pytest.raises(ValueError):
        RunningTotals((F(1), F(0)), (F(1), F(0)), 3, (F(1), F(0), F(2))).spent()
    with pytest.raises(ValueError):
        RunningTotals((F(1),), (F(1), F(0)), 3, (F(1), F(0))).spent()


def test_covers_compares_everywhere_and_spent() -> None:
    base = RunningTotals((F(1), F(0)), (F(2), F(1)), 3, (F(1), F(2)))
    assert base.covers(base)
    assert base.covers(RunningTotals((F(1), F(0)), (F(1), F(1)), 3, (F(1), F(2))))
    assert not base.covers(RunningTotals((F(1), F(0)), (F(2), F(3)), 3, (F(1), F(2))))  # spent δ higher
    # same spent, but more of it everywhere (i.e. in every epoch): not covered
    assert not base.covers(RunningTotals((F(2), F(0)), (F(1), F(1)), 3, (F(0), F(2))))
    assert RunningTotals((F(2), F(0)), (F(1), F(1)), 3, (F(0), F(2))).covers(base)
    with pytest.raises(ValueError):
        RunningTotals.zero(1).covers(RunningTotals.zero(2))
    with pytest.raises(ValueError):
        RunningTotals.zero(2).covers(RunningTotals.zero(1))


def test_running_totals_from_dict_messages() -> None:
    good = {
        "everywhere": ["1/2", "0/1"],
        "closed_max": ["1/4", "1/10"],
        "current_epoch": 4,
        "current": ["0/1", "3/1"],
    }
    assert RunningTotals.from_dict(good, 2) == RunningTotals(
        (F(1, 2), F(0)), (F(1, 4), F(1, 10)), 4, (F(0), F(3))
    )
    assert RunningTotals.from_dict({**good, "current_epoch": None}, 2).current_epoch is None
    assert RunningTotals.from_dict({**good, "current_epoch": -3}, 2).current_epoch == -3
    for field in ("everywhere", "closed_max", "current"):
        name = f"totals {field}"
        cases = [
            (["1/2"], rf"^{name}: expected 2 fractions 'p/q', got \['1/2'\]$"),
            (["1/2", "1/2", "1/2"], rf"^{name}: expected 2 fractions 'p/q'"),
            ("10", rf"^{name}: expected 2 fractions 'p/q', got '10'$"),
            (("1/2", "0/1"), rf"^{name}: expected 2 fractions 'p/q'"),
            (None, rf"^{name}: expected 2 fractions 'p/q', got None$"),
            (["1/2", 0], rf"^{name}: expected 2 fractions 'p/q'"),
            (["1/2", "x"], rf"^{name}: not an exact fraction: "),
            (["1/0", "0/1"], rf"^{name}: not an exact fraction: "),
            (["1/2", "-1/3"], rf"^{name}: negative amount \['1/2', '-1/3'\]$"),
        ]
        for value, message in cases:
            with pytest.raises(LedgerFormatError, match=message):
                RunningTotals.from_dict({**good, field: value}, 2)
        with pytest.raises(LedgerFormatError, match=rf"^{name}: expected 2 fractions"):
            RunningTotals.from_dict({k: v for k, v in good.items() if k != field}, 2)
    for epoch in ("4", 4.0, True):
        with pytest.raises(LedgerFormatError, match=r"^totals current_epoch: must be an int, got "):
            RunningTotals.from_dict({**good, "current_epoch": epoch}, 2)
    with pytest.raises(LedgerFormatError, match=r"^totals: expected an object, got \[\]$"):
        RunningTotals.from_dict([], 2)


# ---- charging --------------------------------------------------------------------------------------


def test_sequential_exact_totals_and_boundary() -> None:
    ledger = PrivacyLedger(Budget(1.0, 1e-6), ledger_id="seq")
    assert ledger.spent() == Budget(0.0, 0.0) and ledger.remaining() == Budget(1.0, 1e-6)
    steps = [(Budget(0.25, 1e-7), 3), (Budget(0.5, 0.0), None), (Budget(0.125, 4e-7), 1)]
    want = [(F(1, 4), F(1, 10**7)), (F(3, 4), F(1, 10**7)), (F(7, 8), F(5, 10**7))]
    for (budget, epoch), spent in zip(steps, want, strict=True):
        entry = ledger.charge(budget, mechanism="m", epoch=epoch)
        assert ledger.totals.spent() == spent == entry.totals.spent()
        assert ledger.totals.everywhere == spent and ledger.totals.closed_max == Z2
        assert ledger.totals.current == Z2 and ledger.totals.current_epoch is None
        assert entry.spent == Budget(float(spent[0]), float(spent[1]))
    assert ledger.spent() == Budget(0.875, 5e-7)
    assert ledger.remaining() == Budget(0.125, 5e-7)
    # one exact fraction more than the remainder (ε or δ) is refused; exactly the remainder is allowed
    over_eps = Budget(0.12500000000000003, 0.0)
    over_delta = Budget(0.0, 5.000000000000001e-7)
    for over in (over_eps, over_delta):
        assert exact_value(over.epsilon) + F(7, 8) > 1 or exact_value(over.delta) + F(5, 10**7) > F(1, 10**6)
        assert not ledger.can_charge(over)
        with pytest.raises(BudgetExceeded, match=r"^charging \(ε="):
            ledger.charge(over, mechanism="m")
        assert ledger.sequence == 3
    assert ledger.can_charge(Budget(0.125, 5e-7))
    assert ledger.sequence == 3  # can_charge records nothing
    ledger.charge(Budget(0.125, 5e-7), mechanism="m")
    assert ledger.totals.spent() == (F(1), F(1, 10**6)) and ledger.remaining() == Budget(0.0, 0.0)
    assert ledger.can_charge(Budget(0.0, 0.0))
    assert not ledger.can_charge(Budget(5e-324, 0.0)) and not ledger.can_charge(Budget(0.0, 5e-324))


def test_many_small_charges_do_not_drift() -> None:
    ledger = PrivacyLedger(ZCDPBudget(1.0))
    for i in range(1, 1001):
        ledger.charge(ZCDPBudget(0.001), mechanism="g")
        if i % 250 == 0:
            assert ledger.totals.spent() == (F(i, 1000),)
    assert ledger.spent() == ZCDPBudget(1.0) and ledger.remaining() == ZCDPBudget(0.0)
    assert not ledger.can_charge(ZCDPBudget(1e-300))
    # the same in floats would have drifted: the exact sum is what makes 1000 × 0.001 fit
    assert sum([0.001] * 1000) != 1.0


def test_parallel_exact_totals_and_boundary() -> None:
    ledger = PrivacyLedger(Budget(1.0, 1e-6), composition=parallel_epochs("count:10"), ledger_id="p")
    plan = [
        (0, 0.5, (F(1, 2),)),
        (0, 0.25, (F(3, 4),)),  # same epoch: 0.75
        (1, 0.5, (F(3, 4),)),  # max(0.75, 0.5)
        (1, 0.25, (F(3, 4),)),  # epoch 1 at 0.75
        (2, 0.0, (F(3, 4),)),
        (None, 0.125, (F(7, 8),)),  # everywhere: 0.125 + 0.75
        (2, 0.875, (F(1),)),  # epoch 2 at 0.875: 0.125 + 0.875 = exactly the total
    ]
    for epoch, eps, (spent_eps,) in plan:
        ledger.charge(Budget(eps, 0.0), mechanism="m", epoch=epoch)
        assert ledger.totals.spent() == (spent_eps, F(0))
    assert ledger.totals == RunningTotals((F(1, 8), F(0)), (F(3, 4), F(0)), 2, (F(7, 8), F(0)))
    assert ledger.remaining() == Budget(0.0, 1e-6)
    assert not ledger.can_charge(Budget(5e-324), epoch=2)
    assert ledger.can_charge(Budget(0.125), epoch=3)  # a new epoch starts from 0.125 everywhere
    assert ledger.can_charge(Budget(0.875), epoch=3)
    assert not ledger.can_charge(Budget(0.8750000000000001), epoch=3)
    assert not ledger.can_charge(Budget(5e-324), epoch=1)  # an earlier epoch: on top of the worst
    assert not ledger.can_charge(Budget(5e-324))  # epoch-less: on top of every epoch
    assert ledger.can_charge(Budget(0.0, 1e-6)) and not ledger.can_charge(Budget(0.0, 1.0000000000000002e-6))
    ledger.charge(Budget(0.5, 1e-7), mechanism="m", epoch=3)
    assert ledger.totals.spent() == (F(1), F(1, 10**7))
    # an earlier epoch's charge is composed as if on the most-charged epoch so far
    low = PrivacyLedger(Budget(2.0, 1e-6), composition="parallel_epochs")
    low.charge(Budget(1.0), mechanism="m", epoch=0)
    low.charge(Budget(0.25), mechanism="m", epoch=5)
    low.charge(Budget(0.5), mechanism="m", epoch=2)
    assert low.totals.spent() == (F(3, 2), F(0))
    assert low.totals == RunningTotals(Z2, (F(3, 2), F(0)), 5, (F(1, 4), F(0)))
    assert low.can_charge(Budget(0.5), epoch=1) and not low.can_charge(Budget(0.5000000000000001), epoch=1)


def test_genesis_hash_and_entry_defaults() -> None:
    """The genesis hash is stored state (every first entry links to it): its body is fixed."""
    total = Budget(1.0, 1e-6)
    body = {
        "format": "privstream-ledger-entry",
        "ledger_id": "lid",
        "total": {"kind": "dp", "exact": ["1/1", "1/1000000"]},
        "composition": "parallel_epochs/count:10",
    }
    assert genesis_hash("lid", total, "parallel_epochs/count:10") == _sha(body)
    z = {
        "format": "privstream-ledger-entry",
        "ledger_id": "z",
        "total": {"kind": "zcdp", "exact": ["1/2"]},
        "composition": "sequential",
    }
    assert genesis_hash("z", ZCDPBudget(0.5), "sequential") == _sha(z)
    assert PrivacyLedger(ZCDPBudget(0.5), ledger_id="z").head_hash == _sha(z)
    entry = LedgerEntry.create(
        "lid", 1, "p", Budget(0.5), RunningTotals.zero(2), total=total, composition="sequential"
    )
    assert (entry.mechanism, entry.epoch, entry.label, entry.writer) == ("", None, "", "")
    assert entry.to_dict()["hash"] == entry.entry_hash
    assert LedgerEntry.from_dict(entry.to_dict()) == entry


def test_ledger_identity_defaults_and_checks() -> None:
    a, b = PrivacyLedger(Budget(1.0)), PrivacyLedger(Budget(1.0))
    assert re.fullmatch("[0-9a-f]{16}", a.ledger_id) and re.fullmatch("[0-9a-f]{16}", b.ledger_id)
    assert a.ledger_id != b.ledger_id and a.head_hash != b.head_hash
    assert a.writer == "" and a.composition == "sequential" and a.total == Budget(1.0)
    assert a.charge(Budget(0.5), mechanism="m").writer == ""
    assert PrivacyLedger(Budget(1.0), ledger_id="given").ledger_id == "given"
    for bad in ("", 5, b"id"):
        with pytest.raises(
            ValueError, match=rf"^ledger_id must be a non-empty string, got {re.escape(repr(bad))}$"
        ):
            PrivacyLedger(Budget(1.0), ledger_id=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^total must be a Budget or ZCDPBudget, not float$"):
        PrivacyLedger(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^writer must be a str, not int$"):
        PrivacyLedger(Budget(1.0), writer=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^writer must be a str, not NoneType$"):
        a.writer = None  # type: ignore[assignment]
    # a head whose totals are of another width than the total is refused, not truncated
    odd = LedgerEntry.create(
        "o", 1, "p", Budget(0.5), RunningTotals.zero(1), total=Budget(1.0), composition="sequential"
    )
    with pytest.raises(ValueError):
        PrivacyLedger.from_entry(odd)
    wide = RunningTotals((F(0), F(0), F(0)), (F(0), F(0), F(0)), None, (F(0), F(0), F(0)))
    odd3 = LedgerEntry.create("o", 1, "p", Budget(0.5), wide, total=Budget(1.0), composition="sequential")
    with pytest.raises(ValueError):
        PrivacyLedger.from_entry(odd3)


def test_charge_entry_fields_and_chain() -> None:
    total = Budget(1.0, 1e-6)
    ledger = PrivacyLedger(total, composition="parallel_epochs", ledger_id="lid", writer="w1")
    genesis = genesis_hash("lid", total, "parallel_epochs")
    assert ledger.head_hash == genesis and ledger.sequence == 0 and ledger.head is None
    assert genesis != genesis_hash("lid2", total, "parallel_epochs")
    assert genesis != genesis_hash("lid", Budget(1.0, 2e-6), "parallel_epochs")
    assert genesis != genesis_hash("lid", total, "sequential")
    e1 = ledger.charge(Budget(0.25, 1e-7), mechanism="pmg", epoch=7, label="window 7")
    assert (e1.ledger_id, e1.sequence, e1.prev_hash) == ("lid", 1, genesis)
    assert (e1.budget, e1.mechanism, e1.epoch, e1.label, e1.writer) == (
        Budget(0.25, 1e-7),
        "pmg",
        7,
        "window 7",
        "w1",
    )
    assert (e1.total, e1.composition) == (total, "parallel_epochs")
    assert e1.totals == RunningTotals(Z2, Z2, 7, (F(1, 4), F(1, 10**7)))
    body = e1.to_dict()
    assert body["hash"] == e1.entry_hash == _sha({k: v for k, v in body.items() if k != "hash"})
    assert body["charge"] == {"kind": "dp", "exact": ["1/4", "1/10000000"]}
    assert ledger.head is e1 and ledger.head_hash == e1.entry_hash
    ledger.writer = "w2"
    e2 = ledger.charge(Budget(0.25, 0.0), mechanism="gshm")
    assert (e2.sequence, e2.prev_hash, e2.writer, e2.epoch, e2.label) == (2, e1.entry_hash, "w2", None, "")
    assert LedgerEntry.from_bytes(e2.to_bytes()) == e2
    with pytest.raises(TypeError, match="^budget must be a Budget like the ledger total, not ZCDPBudget$"):
        ledger.charge(ZCDPBudget(0.1), mechanism="m")
    with pytest.raises(TypeError, match="^epoch: must be an int"):
        ledger.charge(Budget(0.1), mechanism="m", epoch=True)
    with pytest.raises(TypeError, match="^epoch: must be an int"):
        ledger.can_charge(Budget(0.1), epoch="1")
    with pytest.raises(TypeError):
        ledger.can_charge(ZCDPBudget(0.1))
    assert ledger.sequence == 2


def test_hook_sees_the_new_state_and_rollback() -> None:
    seen: list[bytes] = []
    ledger = PrivacyLedger(Budget(1.0), on_charge=seen.append, ledger_id="h")
    entry = ledger.charge(Budget(0.5), mechanism="m")
    assert seen == [ledger.to_bytes()] and PrivacyLedger.from_bytes(seen[0]).head == entry

    def broken(_: bytes) -> None:
        raise KeyboardInterrupt

    ledger._on_charge = broken  # noqa: SLF001
    with pytest.raises(KeyboardInterrupt):
        ledger.charge(Budget(0.25), mechanism="m")
    assert ledger.head is entry and ledger.totals.spent() == (F(1, 2), F(0))


# ---- the chain: apply ------------------------------------------------------------------------------


def _pair(writer: str = "w1") -> tuple[PrivacyLedger, list[LedgerEntry]]:
    ledger = PrivacyLedger(Budget(1.0, 1e-3), composition="parallel_epochs", ledger_id="c", writer=writer)
    return ledger, [ledger.charge(Budget(0.25, 1e-7), mechanism="m", epoch=e) for e in range(3)]


def _empty() -> PrivacyLedger:
    return PrivacyLedger(Budget(1.0, 1e-3), composition="parallel_epochs", ledger_id="c")


def test_apply_messages() -> None:
    _, entries = _pair("w2")
    reader = _empty()
    with pytest.raises(LedgerFormatError) as gap:
        reader.apply(entries[1])
    assert str(gap.value) == "ledger 'c': entry #2 (writer w2) after #0: entries are missing (a gap)"
    _, anonymous = _pair("")
    with pytest.raises(LedgerFormatError) as gap:
        reader.apply(anonymous[2])
    assert str(gap.value) == "ledger 'c': entry #3 (writer ?) after #0: entries are missing (a gap)"
    assert reader.apply(entries[0]) is True and reader.apply(entries[1]) is True
    assert reader.apply(entries[1]) is False  # a redelivered head
    with pytest.raises(LedgerFormatError) as old:
        reader.apply(entries[0])
    assert str(old.value) == (
        "ledger 'c': entry #1 (writer w2) after #2: reordered, replayed, or a second writer forked the ledger"
    )
    # a second writer's entry #2 (same sequence as the head, another hash): a fork, named as such
    other = PrivacyLedger.from_entry(entries[0], writer="w3")
    fork = other.charge(Budget(0.125, 0.0), mechanism="m", epoch=1)
    with pytest.raises(LedgerFormatError) as forked:
        reader.apply(fork)
    assert str(forked.value) == (
        "ledger 'c': entry #2 (writer w3) after #2: reordered, replayed, or a second writer forked the ledger"
        " (head #2 was written by w2, this entry by w3)"
    )
    # ... and its successor does not link to the head
    nxt = other.charge(Budget(0.125, 0.0), mechanism="m", epoch=2)
    with pytest.raises(LedgerFormatError) as unlinked:
        reader.apply(nxt)
    assert str(unlinked.value) == (
        "ledger 'c': entry #3 (writer w3) does not link to #2: edited, or a second writer forked the ledger"
        " (head #2 was written by w2, this entry by w3)"
    )
    assert reader.sequence == 2 and reader.head == entries[1]


def test_apply_refuses_wrong_totals_overspend_and_identity() -> None:
    _, entries = _pair()
    reader = _empty()
    reader.apply(entries[0])
    totals = entries[1].totals
    for wrong in (
        RunningTotals(totals.everywhere, totals.closed_max, totals.current_epoch, (F(0), F(0))),
        RunningTotals((F(1, 8), F(0)), totals.closed_max, totals.current_epoch, totals.current),
        RunningTotals(totals.everywhere, totals.closed_max, 5, totals.current),
    ):
        edited = LedgerEntry.create(
            "c", 2, entries[0].entry_hash, entries[1].budget, wrong, total=Budget(1.0, 1e-3),
            composition="parallel_epochs", mechanism="m", epoch=1, writer="w1",
        )  # fmt: skip
        with pytest.raises(
            LedgerFormatError, match=r"^ledger 'c': entry #2 \(writer w1\): its running totals do not add up"
        ):
            reader.apply(edited)
    # totals that add up but spend beyond the total
    big = Budget(0.9, 0.0)
    after = reader.totals.after(big.exact, None, "parallel_epochs")
    over = LedgerEntry.create(
        "c", 2, entries[0].entry_hash, big, after, total=Budget(1.0, 1e-3), composition="parallel_epochs"
    )
    with pytest.raises(
        LedgerFormatError, match=r"^ledger 'c': entry #2 \(writer \?\): spends beyond the total"
    ):
        reader.apply(over)
    # exactly at the total is accepted
    fits = Budget(0.75, 0.0)
    ok = LedgerEntry.create(
        "c", 2, entries[0].entry_hash, fits, reader.totals.after(fits.exact, None, "parallel_epochs"),
        total=Budget(1.0, 1e-3), composition="parallel_epochs",
    )  # fmt: skip
    assert reader.apply(ok) and reader.totals.spent() == (F(1), F(1, 10**7))
    # wrong identity
    with pytest.raises(LedgerFormatError, match=r"^entry of ledger 'x' applied to ledger 'c'$"):
        _empty().apply(_renamed(entries[0], "x"))
    for total, composition in ((Budget(1.0, 2e-3), "parallel_epochs"), (Budget(1.0, 1e-3), "sequential")):
        ledger = PrivacyLedger(total, composition=composition, ledger_id="c")
        with pytest.raises(LedgerFormatError, match=r"^ledger 'c': entry #1 states total/composition"):
            ledger.apply(entries[0])
    with pytest.raises(TypeError, match=r"^entry must be a LedgerEntry, not dict$"):
        _empty().apply(entries[0].to_dict())  # type: ignore[arg-type]


def _renamed(entry: LedgerEntry, ledger_id: str) -> LedgerEntry:
    return LedgerEntry.create(
        ledger_id, entry.sequence, entry.prev_hash, entry.budget, entry.totals, total=entry.total,
        composition=entry.composition, mechanism=entry.mechanism, epoch=entry.epoch,
    )  # fmt: skip


def test_from_entry_defaults_and_hook() -> None:
    _, entries = _pair("w1")
    alone = PrivacyLedger.from_entry(entries[2])
    assert alone.writer == "" and alone.ledger_id == "c" and alone.sequence == 3
    assert alone.charge(Budget(0.25, 0.0), mechanism="m", epoch=3).writer == ""
    seen: list[bytes] = []
    hooked = PrivacyLedger.from_entry(entries[2], writer="w9", on_charge=seen.append)
    entry = hooked.charge(Budget(0.25, 0.0), mechanism="m", epoch=3)
    assert entry.writer == "w9" and len(seen) == 1 and PrivacyLedger.from_bytes(seen[0]).head == entry
    over = LedgerEntry.create(
        "c", 1, "h", Budget(0.5), RunningTotals((F(2), F(0)), Z2, None, Z2), total=Budget(1.0, 1e-3),
        composition="parallel_epochs",
    )  # fmt: skip
    with pytest.raises(LedgerFormatError, match=r"^ledger 'c': entry #1 spends beyond the total$"):
        PrivacyLedger.from_entry(over)


# ---- entries and states read back ------------------------------------------------------------------


def test_entry_from_dict_refusals() -> None:
    _, entries = _pair()
    good = entries[1].to_dict()
    assert LedgerEntry.from_dict(good) == entries[1]

    def refused(changes: dict, message: str, *, rehash: bool = True) -> None:
        data = {**good, **changes}
        data = _rehash(data) if rehash else data
        with pytest.raises(LedgerFormatError, match=message):
            LedgerEntry.from_dict(data)

    refused({"total": [1]}, r"^ledger entry: entry total: unknown budget \[1\]$")
    refused({"total": {"kind": "ZCDP", "exact": ["1/1"]}}, r"^ledger entry: entry total: unknown budget ")
    refused(
        {"total": {"kind": "dp", "exact": ["1/1"]}},
        r"^ledger entry: entry total: expected 2 fractions 'p/q', got \['1/1'\]$",
    )
    refused(
        {"total": {"kind": "dp", "exact": ["1/1", "1/1"]}},
        r"^ledger entry: entry total: invalid budget: delta must be < 1.0",
    )
    refused(
        {"total": {"kind": "dp", "exact": ["1/3", "0/1"]}},
        r"^ledger entry: entry total: \['1/3', '0/1'\] is not the exact value",
    )
    refused(
        {"charge": {"kind": "zcdp", "exact": ["1/4"]}},
        r"^ledger entry: charge kind differs from the total's$",
    )
    refused(
        {"charge": {"kind": "dp", "exact": ["1/4"]}}, r"^ledger entry: entry charge: expected 2 fractions"
    )
    refused({"epoch": "1"}, r"^ledger entry: entry epoch: must be an int, got str$")
    refused({"sequence": 0}, r"^ledger entry: entry sequence: must be an int >= 1, got 0$")
    refused({"sequence": "2"}, r"^ledger entry: entry sequence: must be an int >= 1, got str$")
    refused(
        {"composition": "parallel_epochs/"},
        r"^ledger entry: malformed text fields or composition$",
    )
    refused({"ledger_id": ""}, r"^ledger entry: malformed text fields or composition$")
    refused({"label": 3}, r"^ledger entry: malformed text fields or composition$")
    refused({"hash": 3}, r"^ledger entry: malformed text fields or composition$", rehash=False)
    refused(
        {"totals": {**good["totals"], "current_epoch": "1"}},
        r"^ledger entry: totals current_epoch: must be an int, got str$",
    )
    refused(
        {"totals": {**good["totals"], "everywhere": "10"}},
        r"^ledger entry: totals everywhere: expected 2 fractions",
    )
    refused({"version": 3}, r"^unsupported ledger entry format/version 'privstream-ledger-entry'/3$")
    refused({"format": "x"}, r"^unsupported ledger entry format/version 'x'/2$")
    refused({"mechanism": "other"}, r"^ledger entry #2: hash mismatch \(corrupt or edited\)$", rehash=False)
    missing = {k: v for k, v in good.items() if k != "writer"}
    with pytest.raises(LedgerFormatError, match=r"^ledger entry: missing field 'writer'$"):
        LedgerEntry.from_dict(missing)
    with pytest.raises(LedgerFormatError, match=r"^ledger entry: expected an object, got list$"):
        LedgerEntry.from_dict([])
    with pytest.raises(LedgerFormatError, match=r"^ledger entry is not JSON"):
        LedgerEntry.from_bytes(entries[1].to_bytes()[:-1])


def _state(ledger: PrivacyLedger) -> dict:
    return json.loads(ledger.to_json())


def test_state_loading_refusals() -> None:
    ledger, _ = _pair()
    body = _state(ledger)
    assert PrivacyLedger.from_json(_sealed(body)).head == ledger.head
    with pytest.raises(LedgerFormatError, match=r"^ledger JSON must be an object with a checksum$"):
        PrivacyLedger.from_json(json.dumps({k: v for k, v in body.items() if k != "checksum"}))
    with pytest.raises(LedgerFormatError, match=r"^ledger JSON must be an object with a checksum$"):
        PrivacyLedger.from_json('["checksum"]')
    with pytest.raises(LedgerFormatError, match=r"^ledger JSON must be an object with a checksum$"):
        PrivacyLedger.from_json("[]")
    with pytest.raises(LedgerFormatError, match=r"^unsupported ledger format/version 'privstream-ledger'/3$"):
        PrivacyLedger.from_json(_sealed({**body, "version": 3}))
    with pytest.raises(LedgerFormatError, match=r"^unsupported ledger format/version 'x'/2$"):
        PrivacyLedger.from_json(_sealed({**body, "format": "x"}))
    with pytest.raises(LedgerFormatError, match=r"^ledger checksum mismatch"):
        PrivacyLedger.from_json(json.dumps({**body, "writer": "other"}))
    with pytest.raises(LedgerFormatError, match=r"^ledger total: unknown budget \[1\]$"):
        PrivacyLedger.from_json(_sealed({**body, "total": [1]}))
    with pytest.raises(LedgerFormatError, match=r"^ledger total: unknown budget \{'kind': 'x'\}$"):
        PrivacyLedger.from_json(_sealed({**body, "total": {"kind": "x"}}))
    with pytest.raises(LedgerFormatError, match=r"^ledger total: expected 2 fractions"):
        PrivacyLedger.from_json(_sealed({**body, "total": {"kind": "dp", "exact": ["1/1"]}}))
    # the head must belong to the state's identity
    with pytest.raises(LedgerFormatError, match=r"^entry of ledger 'c' applied to ledger 'd'$"):
        PrivacyLedger.from_json(_sealed({**body, "ledger_id": "d"}))
    with pytest.raises(LedgerFormatError, match=r"^ledger 'c': entry #3 states total/composition"):
        PrivacyLedger.from_json(_sealed({**body, "composition": "sequential"}))
    with pytest.raises(LedgerFormatError, match=r"^malformed ledger: KeyError\('writer'\)$"):
        PrivacyLedger.from_json(_sealed({k: v for k, v in body.items() if k not in ("checksum", "writer")}))
    with pytest.raises(LedgerFormatError, match=r"^ledger is not JSON"):
        PrivacyLedger.from_json(ledger.to_json()[:-3])
    with pytest.raises(LedgerFormatError, match=r"^not a privstream ledger \(bad magic\)$"):
        PrivacyLedger.from_bytes(ledger.to_json().encode())
    with pytest.raises(LedgerFormatError, match=r"^not a privstream ledger \(bad magic\)$"):
        PrivacyLedger.from_bytes(ledger.to_json())  # type: ignore[arg-type]
    assert PrivacyLedger.from_bytes(bytearray(ledger.to_bytes())).head == ledger.head
    # an empty ledger round-trips empty
    empty = PrivacyLedger(ZCDPBudget(0.5), ledger_id="e", writer="w")
    back = PrivacyLedger.from_bytes(empty.to_bytes())
    assert (
        back.head is None and back.ledger_id == "e" and back.writer == "w" and back.total == ZCDPBudget(0.5)
    )


def test_stale_snapshot_is_refused_with_previous() -> None:
    ledger, _ = _pair()
    old = PrivacyLedger.from_bytes(ledger.to_bytes())
    ledger.charge(Budget(0.125, 0.0), mechanism="m", epoch=3)
    with pytest.raises(
        LedgerFormatError, match=r"^stale or divergent ledger snapshot: it would forget spent budget$"
    ):
        PrivacyLedger.from_bytes(old.to_bytes(), previous=ledger)
    other = PrivacyLedger(Budget(1.0, 1e-3), composition="parallel_epochs", ledger_id="zz")
    with pytest.raises(
        LedgerFormatError, match=r"^stale or divergent ledger snapshot: snapshots belong to different"
    ):
        PrivacyLedger.from_bytes(ledger.to_bytes(), previous=other)
    assert PrivacyLedger.from_bytes(ledger.to_bytes(), previous=old).sequence == 4


# ---- version-1 migration ---------------------------------------------------------------------------


def test_migration_head_fields() -> None:
    entries = [_v1_entry(0, None, 0.25), _v1_entry(1, 2), _v1_entry(2, 2), _v1_entry(3, 1)]
    text, checksum = _v1_state(entries)
    migrated = PrivacyLedger.from_json(text)
    head = migrated.head
    assert head is not None
    assert migrated.ledger_id == "old" == head.ledger_id
    assert head.prev_hash == genesis_hash("old", Budget(1.0, 1e-6), "parallel_epochs")
    assert (
        head.prev_hash
        == PrivacyLedger(Budget(1.0, 1e-6), composition="parallel_epochs", ledger_id="old").head_hash
    )
    assert head.mechanism == "migrated"
    assert head.label == f"version-1 ledger of 4 entries, checksum {checksum}"
    assert head.sequence == 4 and head.budget == Budget(0.0, 0.0) and head.epoch is None
    # exact: 0.25 everywhere; epoch 2 at 0.2; epoch 1 (earlier) composed on top: 0.3
    assert head.totals == RunningTotals(
        (F(1, 4), F(1, 10**7)), (F(3, 10), F(3, 10**7)), 2, (F(1, 5), F(2, 10**7))
    )
    again = PrivacyLedger.from_bytes(migrated.to_bytes())
    assert again.head == head
    # an empty version-1 state migrates to an empty ledger
    empty = PrivacyLedger.from_json(_v1_state([])[0])
    assert empty.head is None and empty.ledger_id == "old"
    # a zCDP version-1 state
    z_entries = [{"seq": 0, "budget": {"kind": "zcdp", "rho": 0.25}, "epoch": None}]
    z = PrivacyLedger.from_json(_v1_state(z_entries, kind="zcdp")[0])
    assert z.total == ZCDPBudget(1.0) and z.totals.spent() == (F(1, 4),)


def test_migration_refusals() -> None:
    for epoch, got in (("3", "str"), (1.5, "float"), (True, "bool")):
        with pytest.raises(LedgerFormatError) as bad:
            PrivacyLedger.from_json(_v1_state([_v1_entry(0, epoch)])[0])
        assert str(bad.value) == f"entry epoch: must be an int, got {got}"
    with pytest.raises(LedgerFormatError, match=r"^version-1 ledger entries are not consecutively numbered$"):
        PrivacyLedger.from_json(_v1_state([_v1_entry(1, 0)])[0])
    with pytest.raises(LedgerFormatError, match=r"^version-1 ledger entry budget kind differs"):
        PrivacyLedger.from_json(
            _v1_state([{"seq": 0, "budget": {"kind": "zcdp", "rho": 0.1}, "epoch": None}])[0]
        )
    with pytest.raises(LedgerFormatError, match=r"^ledger 'old': entry #11 spends beyond the total$"):
        PrivacyLedger.from_json(_v1_state([_v1_entry(i, None) for i in range(11)])[0])


# ---- most_advanced ---------------------------------------------------------------------------------


def test_most_advanced_messages_and_choice() -> None:
    ledger, _ = _pair()
    with pytest.raises(TypeError, match=r"^a must be a PrivacyLedger, not str$"):
        most_advanced("x", ledger)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^b must be a PrivacyLedger, not int$"):
        most_advanced(ledger, 5)  # type: ignore[arg-type]
    copy = PrivacyLedger.from_bytes(ledger.to_bytes())
    assert most_advanced(ledger, copy) is ledger and most_advanced(copy, ledger) is copy
    ledger.charge(Budget(0.125, 0.0), mechanism="m", epoch=3)
    assert most_advanced(copy, ledger) is ledger and most_advanced(ledger, copy) is ledger
    fork = PrivacyLedger.from_bytes(copy.to_bytes())
    fork.charge(Budget(0.0625, 0.0), mechanism="m", epoch=3)
    with pytest.raises(
        LedgerFormatError, match=re.escape("divergent snapshots of ledger 'c': two different entries #4")
    ):
        most_advanced(fork, ledger)
    # a later state with lower totals: a fork
    lower = LedgerEntry.create(
        "c",
        9,
        "h",
        Budget(0.0),
        RunningTotals.zero(2),
        total=Budget(1.0, 1e-3),
        composition="parallel_epochs",
    )
    behind = PrivacyLedger.from_entry(lower)
    for a, b in ((behind, ledger), (ledger, behind)):
        with pytest.raises(
            LedgerFormatError,
            match=r"^divergent snapshots of ledger 'c': entry #9 has spent less than entry #4$",
        ):
            most_advanced(a, b)


@pytest.mark.parametrize("delta", [1.0, 1.5, 0.0])
def test_zcdp_conversion_refuses_delta_outside_the_open_unit_interval(delta: float) -> None:
    """DPSW Thm 3.2 holds for δ ∈ (0, 1): ln(1/δ) must be positive (δ >= 1 would make ε <= ρ, or
    the square root of a negative number)."""
    with pytest.raises(ValueError, match="^delta must be"):
        zcdp_to_dp(0.1, delta)
