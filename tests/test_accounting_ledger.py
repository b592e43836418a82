"""PrivacyLedger: refuses over-budget releases, persists before publishing, never forgets."""

from __future__ import annotations

import json

import pytest

from privstream.accounting import (
    Budget,
    BudgetExceeded,
    LedgerFormatError,
    PrivacyLedger,
    ZCDPBudget,
    most_advanced,
)
from privstream.mechanisms import release
from privstream.noise import SeededRandomSource
from privstream.sketches import MisraGries


def test_refuses_over_budget_and_records_nothing() -> None:
    ledger = PrivacyLedger(Budget(1.0, 1e-6))
    ledger.charge(Budget(0.6, 5e-7), mechanism="pmg", epoch=1)
    with pytest.raises(BudgetExceeded):
        ledger.charge(Budget(0.5, 1e-7), mechanism="pmg", epoch=2)  # ε would exceed
    with pytest.raises(BudgetExceeded):
        ledger.charge(Budget(0.1, 6e-7), mechanism="pmg", epoch=2)  # δ would exceed
    assert len(ledger.entries) == 1
    ledger.charge(Budget(0.4, 5e-7), mechanism="gshm")  # exactly the remainder is allowed
    assert not ledger.can_charge(Budget(1e-12, 0.0))
    assert ledger.remaining() == Budget(0.0, 0.0)


def test_ten_tenths_fit_exactly() -> None:
    ledger = PrivacyLedger(Budget(1.0))
    for _ in range(10):
        ledger.charge(Budget(0.1), mechanism="pure_topk")
    # 0.1 is composed as exactly 1/10 (in binary the ten would exceed 1.0)
    assert ledger.remaining() == Budget(0.0)
    assert not ledger.can_charge(Budget(1e-15))


def test_parallel_epochs() -> None:
    ledger = PrivacyLedger(Budget(1.0, 1e-6), composition="parallel_epochs")
    for epoch in range(5):
        ledger.charge(Budget(0.8, 1e-7), mechanism="pmg", epoch=epoch)
    assert ledger.spent() == Budget(0.8, 1e-7)
    with pytest.raises(BudgetExceeded):
        ledger.charge(Budget(0.3, 0.0), mechanism="pmg", epoch=3)
    with pytest.raises(BudgetExceeded):  # an epoch-less release covers every epoch
        ledger.charge(Budget(0.3, 0.0), mechanism="pmg")
    ledger.charge(Budget(0.2, 0.0), mechanism="pmg")
    assert ledger.spent().epsilon == pytest.approx(1.0)


def test_round_trip_bytes_and_json() -> None:
    ledger = PrivacyLedger(ZCDPBudget(0.5))
    ledger.charge(ZCDPBudget(0.2), mechanism="gshm", epoch=7, label="window 7")
    for restored in (PrivacyLedger.from_bytes(ledger.to_bytes()), PrivacyLedger.from_json(ledger.to_json())):
        assert restored.entries == ledger.entries
        assert restored.spent() == ledger.spent()
        assert restored.ledger_id == ledger.ledger_id
        with pytest.raises(BudgetExceeded):
            restored.charge(ZCDPBudget(0.31), mechanism="gshm")
    with pytest.raises(TypeError, match="ZCDPBudget"):
        ledger.charge(Budget(0.1), mechanism="pmg")


def test_corrupt_or_stale_snapshots_are_refused() -> None:
    ledger = PrivacyLedger(Budget(2.0, 1e-5))
    ledger.charge(Budget(1.0, 1e-6), mechanism="pmg")
    old = ledger.to_bytes()
    ledger.charge(Budget(0.5, 1e-6), mechanism="pmg")
    with pytest.raises(LedgerFormatError, match="stale"):
        PrivacyLedger.from_bytes(old, previous=ledger)
    body = json.loads(ledger.to_json())
    body["entries"][1]["budget"]["epsilon"] = 0.0  # "forget" spent budget by editing
    with pytest.raises(LedgerFormatError, match="checksum"):
        PrivacyLedger.from_json(json.dumps(body))
    data = ledger.to_bytes()
    for bad in (data[:-5], b"XX" + data[2:], data.replace(b'"version": 1', b'"version": 9')):
        with pytest.raises(LedgerFormatError):
            PrivacyLedger.from_bytes(bad)
    fresh = PrivacyLedger.from_bytes(data, previous=ledger)
    assert fresh.spent() == ledger.spent()


def test_persistence_hook_runs_before_release_and_rolls_back_on_failure() -> None:
    persisted: list[bytes] = []
    ledger = PrivacyLedger(Budget(1.0, 1e-3), on_charge=persisted.append)
    sketch = MisraGries(4)
    for x in (1, 1, 2, 3):
        sketch.update(x)
    out = release(
        sketch, Budget(0.5, 5e-4), mechanism="pmg", ledger=ledger, rng=SeededRandomSource(1), epoch=3
    )
    assert len(persisted) == 1
    assert PrivacyLedger.from_bytes(persisted[0]).entries[0].mechanism == out.mechanism == "pmg"

    def broken(_: bytes) -> None:
        raise OSError("disk full")

    failing = PrivacyLedger(Budget(1.0, 1e-3), on_charge=broken)
    with pytest.raises(OSError):
        release(sketch, Budget(0.5, 5e-4), mechanism="pmg", ledger=failing)
    assert failing.entries == ()  # nothing recorded, nothing released
    ledger.charge(Budget(0.5, 5e-4), mechanism="pmg")
    with pytest.raises(BudgetExceeded):
        release(sketch, Budget(0.1, 1e-4), mechanism="pmg", ledger=ledger)


def test_bad_ledger_parameters() -> None:
    with pytest.raises(ValueError, match="composition"):
        PrivacyLedger(Budget(1.0), composition="advanced")
    with pytest.raises(TypeError, match="total"):
        PrivacyLedger(1.0)  # type: ignore[arg-type]


def test_reloaded_ledger_keeps_persisting_its_charges() -> None:
    """from_bytes/from_json re-attach the on_charge hook: a restored ledger's charges stay durable."""
    first: list[bytes] = []
    ledger = PrivacyLedger(Budget(1.0, 1e-6), on_charge=first.append)
    ledger.charge(Budget(0.25, 0.0), mechanism="pmg", epoch=0)
    for load, data in ((PrivacyLedger.from_bytes, first[-1]), (PrivacyLedger.from_json, ledger.to_json())):
        persisted: list[bytes] = []
        restored = load(data, previous=ledger, on_charge=persisted.append)
        restored.charge(Budget(0.25, 0.0), mechanism="pmg", epoch=1)
        assert len(persisted) == 1 and len(PrivacyLedger.from_bytes(persisted[0]).entries) == 2

        def broken(_: bytes) -> None:
            raise OSError("disk full")

        failing = load(data, on_charge=broken)
        with pytest.raises(OSError):
            failing.charge(Budget(0.25, 0.0), mechanism="pmg")
        assert len(failing.entries) == 1  # rolled back
    assert PrivacyLedger.from_bytes(first[-1]).entries == ledger.entries  # no hook: still loads


def test_most_advanced_picks_the_snapshot_that_extends_the_other() -> None:
    """Restoring an older checkpoint must never forget charges recorded after it."""
    live = PrivacyLedger(Budget(1.0, 1e-6), composition="parallel_epochs", ledger_id="hh")
    live.charge(Budget(0.5, 1e-7), mechanism="gshm", epoch=0)
    savepoint = PrivacyLedger.from_bytes(live.to_bytes())
    live.charge(Budget(0.5, 1e-7), mechanism="gshm", epoch=1)
    topic = PrivacyLedger.from_bytes(live.to_bytes())
    assert most_advanced(savepoint, topic) is topic
    assert most_advanced(topic, savepoint) is topic
    same = PrivacyLedger.from_bytes(topic.to_bytes())
    assert most_advanced(topic, same) is topic
    assert topic.extends(savepoint) and not savepoint.extends(topic)
    # the reconciled ledger refuses what the stale one would have allowed
    assert savepoint.can_charge(Budget(0.6, 1e-7), epoch=1)
    assert not most_advanced(savepoint, topic).can_charge(Budget(0.6, 1e-7), epoch=1)
    # divergent histories (each charged something the other never saw): refuse to pick
    fork = PrivacyLedger.from_bytes(savepoint.to_bytes())
    fork.charge(Budget(0.3, 0.0), mechanism="gshm", epoch=2)
    for a, b in ((fork, topic), (topic, fork)):
        with pytest.raises(LedgerFormatError, match="divergent"):
            most_advanced(a, b)
    with pytest.raises(LedgerFormatError, match="stale or divergent"):
        PrivacyLedger.from_bytes(fork.to_bytes(), previous=topic)
    # snapshots of different ledgers, or of the same id with another total/composition
    with pytest.raises(LedgerFormatError, match="different ledgers"):
        most_advanced(topic, PrivacyLedger(Budget(1.0, 1e-6), composition="parallel_epochs"))
    with pytest.raises(LedgerFormatError, match="total/composition"):
        most_advanced(topic, PrivacyLedger(Budget(2.0, 1e-6), composition="parallel_epochs", ledger_id="hh"))
    with pytest.raises(LedgerFormatError, match="total/composition"):
        most_advanced(topic, PrivacyLedger(Budget(1.0, 1e-6), ledger_id="hh"))
    with pytest.raises(TypeError, match="b"):
        most_advanced(topic, topic.to_bytes())  # type: ignore[arg-type]
