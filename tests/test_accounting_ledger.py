"""PrivacyLedger: refuses over-budget releases, persists before publishing, never forgets; its
entries are a hash chain of constant size (gaps, reorders, edits and forks are detected)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from fractions import Fraction

import pytest

from privstream.accounting import (
    Budget,
    BudgetExceeded,
    LedgerEntry,
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
    assert ledger.sequence == 1
    ledger.charge(Budget(0.4, 5e-7), mechanism="gshm")  # exactly the remainder is allowed
    assert not ledger.can_charge(Budget(1e-12, 0.0))
    assert ledger.remaining() == Budget(0.0, 0.0)


def test_ten_tenths_fit_exactly() -> None:
    ledger = PrivacyLedger(Budget(1.0))
    for _ in range(10):
        ledger.charge(Budget(0.1), mechanism="pure_topk")
    # 0.1 is composed as exactly 1/10 (in binary the ten would exceed 1.0)
    assert ledger.remaining() == Budget(0.0)
    assert ledger.totals.spent() == (Fraction(1), Fraction(0))
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


def test_parallel_epochs_in_order_is_exact_and_an_earlier_epoch_is_composed_conservatively() -> None:
    """In non-decreasing epoch order the running totals give exactly Σ(None) + max over epochs;
    a charge to an earlier epoch (whose own sum is not kept) counts as if on the worst epoch."""
    ledger = PrivacyLedger(Budget(2.0, 1e-5), composition="parallel_epochs")
    for epoch, eps in ((0, 0.5), (0, 0.25), (1, 0.5), (2, 1.0), (2, 0.25)):
        ledger.charge(Budget(eps, 1e-7), mechanism="pmg", epoch=epoch)
    # exact: epoch sums (0.75, 2e-7), (0.5, 1e-7), (1.25, 2e-7) -> max (1.25, 2e-7)
    assert ledger.totals.spent() == (Fraction(5, 4), Fraction(2, 10**7))
    ledger.charge(Budget(0.25, 1e-7), mechanism="pmg", epoch=1)  # exact would be 1.25; bound 1.5
    assert ledger.totals.spent() == (Fraction(3, 2), Fraction(3, 10**7))
    assert ledger.sequence == 6


def test_round_trip_bytes_and_json() -> None:
    ledger = PrivacyLedger(ZCDPBudget(0.5), writer="job-1")
    ledger.charge(ZCDPBudget(0.2), mechanism="gshm", epoch=7, label="window 7")
    for restored in (PrivacyLedger.from_bytes(ledger.to_bytes()), PrivacyLedger.from_json(ledger.to_json())):
        assert restored.head == ledger.head and restored.sequence == 1
        assert restored.spent() == ledger.spent()
        assert restored.ledger_id == ledger.ledger_id and restored.writer == "job-1"
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
    body["head"]["totals"]["everywhere"][0] = "0/1"  # "forget" spent budget by editing
    with pytest.raises(LedgerFormatError, match="checksum"):
        PrivacyLedger.from_json(json.dumps(body))
    data = ledger.to_bytes()
    for bad in (data[:-5], b"XX" + data[2:], data.replace(b'"version": 2', b'"version": 9')):
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
    head = PrivacyLedger.from_bytes(persisted[0]).head
    assert head is not None and head.mechanism == out.mechanism == "pmg"

    def broken(_: bytes) -> None:
        raise OSError("disk full")

    failing = PrivacyLedger(Budget(1.0, 1e-3), on_charge=broken)
    with pytest.raises(OSError):
        release(sketch, Budget(0.5, 5e-4), mechanism="pmg", ledger=failing)
    assert failing.sequence == 0 and failing.head is None  # nothing recorded, nothing released
    ledger.charge(Budget(0.5, 5e-4), mechanism="pmg")
    with pytest.raises(BudgetExceeded):
        release(sketch, Budget(0.1, 1e-4), mechanism="pmg", ledger=ledger)


def test_bad_ledger_parameters() -> None:
    with pytest.raises(ValueError, match="composition"):
        PrivacyLedger(Budget(1.0), composition="advanced")
    with pytest.raises(TypeError, match="total"):
        PrivacyLedger(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ledger_id"):
        PrivacyLedger(Budget(1.0), ledger_id="")
    with pytest.raises(TypeError, match="writer"):
        PrivacyLedger(Budget(1.0), writer=7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="entry"):
        PrivacyLedger(Budget(1.0)).apply(b"entry")  # type: ignore[arg-type]


def test_reloaded_ledger_keeps_persisting_its_charges() -> None:
    """from_bytes/from_json re-attach the on_charge hook: a restored ledger's charges stay durable."""
    first: list[bytes] = []
    ledger = PrivacyLedger(Budget(1.0, 1e-6), on_charge=first.append)
    ledger.charge(Budget(0.25, 0.0), mechanism="pmg", epoch=0)
    for load, data in ((PrivacyLedger.from_bytes, first[-1]), (PrivacyLedger.from_json, ledger.to_json())):
        persisted: list[bytes] = []
        restored = load(data, previous=ledger, on_charge=persisted.append)
        restored.charge(Budget(0.25, 0.0), mechanism="pmg", epoch=1)
        assert len(persisted) == 1 and PrivacyLedger.from_bytes(persisted[0]).sequence == 2

        def broken(_: bytes) -> None:
            raise OSError("disk full")

        failing = load(data, on_charge=broken)
        with pytest.raises(OSError):
            failing.charge(Budget(0.25, 0.0), mechanism="pmg")
        assert failing.sequence == 1  # rolled back
    assert PrivacyLedger.from_bytes(first[-1]).head == ledger.head  # no hook: still loads


def test_most_advanced_picks_the_later_state() -> None:
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
    # the reconciled ledger refuses what the stale one would have allowed
    assert savepoint.can_charge(Budget(0.6, 1e-7), epoch=1)
    assert not most_advanced(savepoint, topic).can_charge(Budget(0.6, 1e-7), epoch=1)
    # divergent histories (each charged something the other never saw) at the same length: refuse
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


# ---- the chain --------------------------------------------------------------------------------------


def _chain(
    n: int, *, writer: str = "job-a", ledger_id: str = "hh"
) -> tuple[PrivacyLedger, list[LedgerEntry]]:
    ledger = PrivacyLedger(
        Budget(1.0, 1e-3), composition="parallel_epochs", ledger_id=ledger_id, writer=writer
    )
    return ledger, [ledger.charge(Budget(0.5, 1e-7), mechanism="pmg", epoch=e) for e in range(n)]


def _reader(ledger_id: str = "hh") -> PrivacyLedger:
    return PrivacyLedger(Budget(1.0, 1e-3), composition="parallel_epochs", ledger_id=ledger_id)


def _rehashed(entry: LedgerEntry, **changes: object) -> LedgerEntry:
    """An edit whose author also recomputed the entry's own hash."""
    edited = replace(entry, **changes)  # type: ignore[arg-type]
    return replace(edited, entry_hash=hashlib.sha256(_body_bytes(edited)).hexdigest())


def _body_bytes(entry: LedgerEntry) -> bytes:
    body = entry.to_dict()
    del body["hash"]
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def test_entries_read_back_in_order_rebuild_the_state() -> None:
    writer, entries = _chain(5)
    reader = _reader()
    for entry in entries:
        assert reader.apply(LedgerEntry.from_bytes(entry.to_bytes()))
    assert reader.head == writer.head and reader.totals == writer.totals and reader.sequence == 5
    assert not reader.apply(entries[-1])  # a redelivered head changes nothing
    # the latest entry alone is the state (what a compacted topic keeps)
    alone = PrivacyLedger.from_entry(LedgerEntry.from_bytes(entries[-1].to_bytes()))
    assert alone.spent() == writer.spent() and alone.head_hash == writer.head_hash
    assert entries[0].prev_hash == _reader().head_hash  # the genesis hash of the ledger's identity


@pytest.mark.parametrize(
    ("order", "match"),
    [
        ([0, 2], "missing"),  # a gap
        ([1], "missing"),  # truncated at the start without compaction semantics: #2 after #0
        ([0, 1, 0], "reordered"),  # an old entry replayed
        ([1, 0], "missing"),  # reordered: #2 first
    ],
)
def test_gaps_and_reorders_are_detected(order: list[int], match: str) -> None:
    _, entries = _chain(3)
    reader = _reader()
    with pytest.raises(LedgerFormatError, match=match):
        for i in order:
            reader.apply(entries[i])


def test_edits_and_truncated_records_are_detected() -> None:
    _, entries = _chain(3)
    data = entries[1].to_bytes()
    with pytest.raises(LedgerFormatError, match="hash mismatch"):  # an edit without a new hash
        LedgerEntry.from_bytes(data.replace(b'"mechanism":"pmg"', b'"mechanism":"gshm"'))
    for cut in (1, len(data) // 2, len(data) - 1):
        with pytest.raises(LedgerFormatError):
            LedgerEntry.from_bytes(data[:cut])
    with pytest.raises(LedgerFormatError, match="format/version"):
        LedgerEntry.from_bytes(data.replace(b'"version":2', b'"version":3'))
    # an edit with a recomputed hash: the charge halved, totals left alone -> they do not add up
    reader = _reader()
    reader.apply(entries[0])
    cheaper = _rehashed(entries[1], budget=Budget(0.25, 1e-7))
    assert LedgerEntry.from_bytes(cheaper.to_bytes()) == cheaper  # self-consistent
    with pytest.raises(LedgerFormatError, match="do not add up"):
        reader.apply(cheaper)
    # ... and the totals edited too: the next entry no longer links to it
    forged = _rehashed(entries[1], budget=Budget(0.25, 1e-7), totals=reader.totals.after(
        Budget(0.25, 1e-7).exact, 1, "parallel_epochs"))  # fmt: skip
    reader.apply(forged)
    with pytest.raises(LedgerFormatError, match="does not link"):
        reader.apply(entries[2])


def test_a_second_writer_forking_the_ledger_is_detected_and_named() -> None:
    a, entries = _chain(2, writer="job-a")
    b = PrivacyLedger.from_entry(entries[0], writer="job-b")  # started from the same state as #2
    forked = b.charge(Budget(0.5, 1e-7), mechanism="pmg", epoch=1)
    reader = _reader()
    for entry in entries:
        reader.apply(entry)
    with pytest.raises(LedgerFormatError, match=r"forked.*job-a.*job-b"):
        reader.apply(forked)
    with pytest.raises(LedgerFormatError, match="another ledger|'other'"):
        reader.apply(_chain(3, ledger_id="other")[1][2])
    other_total = PrivacyLedger(Budget(2.0, 1e-3), composition="parallel_epochs", ledger_id="hh")
    with pytest.raises(LedgerFormatError, match="total/composition"):
        other_total.apply(entries[0])


def test_a_version_1_state_is_migrated_exactly_and_deterministically() -> None:
    """States written by the earlier whole-history format (Flink savepoints, old ledger records) load
    as an equivalent chained state."""
    entries = [
        {"seq": i, "budget": {"kind": "dp", "epsilon": 0.1, "delta": 1e-7}, "mechanism": "pmg", "epoch": e, "label": ""}
        for i, e in enumerate([0, 0, 1, 2, 2, 2])
    ]  # fmt: skip
    body = {
        "format": "privstream-ledger",
        "version": 1,
        "ledger_id": "old",
        "total": {"kind": "dp", "epsilon": 1.0, "delta": 1e-6},
        "composition": "parallel_epochs",
        "entries": entries,
    }
    body["checksum"] = hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    data = b"PSLEDGER" + json.dumps(body, sort_keys=True).encode()
    migrated = PrivacyLedger.from_bytes(data)
    assert migrated.sequence == 6 and migrated.totals.spent() == (Fraction(3, 10), Fraction(3, 10**7))
    assert PrivacyLedger.from_bytes(data).head_hash == migrated.head_hash  # deterministic
    migrated.charge(Budget(0.7, 0.0), mechanism="pmg", epoch=3)  # the chain continues from it
    with pytest.raises(BudgetExceeded):
        migrated.charge(Budget(0.31, 0.0), mechanism="pmg")
    body["entries"][0]["budget"]["epsilon"] = 0.0  # an edit breaks the version-1 checksum
    with pytest.raises(LedgerFormatError, match="checksum"):
        PrivacyLedger.from_bytes(b"PSLEDGER" + json.dumps(body).encode())


def test_ten_thousand_entries_constant_size_and_linear_replay() -> None:
    """Entry size does not grow with the number of past releases (only the digits of the sequence
    number and of the exact totals), and replaying the chain costs the same per entry."""
    ledger = PrivacyLedger(Budget(10_000.0, 0.5), composition="parallel_epochs", ledger_id="long", writer="w")
    data = [ledger.charge(Budget(0.5, 1e-7), mechanism="pmg", epoch=e).to_bytes() for e in range(10_000)]
    size_10, size_10k = len(data[9]), len(data[-1])
    assert size_10k - size_10 <= 16 and size_10k < 700, (size_10, size_10k)
    assert len(ledger.to_bytes()) < 1200  # the state (e.g. Flink's) is one entry plus the identity
    reader = PrivacyLedger(Budget(10_000.0, 0.5), composition="parallel_epochs", ledger_id="long")
    seconds = []
    for start in range(0, 10_000, 2_500):
        t = time.perf_counter()
        for raw in data[start : start + 2_500]:
            reader.apply(LedgerEntry.from_bytes(raw))
        seconds.append(time.perf_counter() - t)
    assert reader.head == ledger.head
    assert max(seconds) < 3 * min(seconds) + 0.05, seconds  # no quadratic growth
