"""How a job's ledger is read back from the ledger topic and resumed, stated from its definitions.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py spend``). A job that
starts from less spend than the topic recorded would release beyond its total budget, so the fold
of the topic's records (:class:`~privstream.connectors.ledger_topic.ChainReader`) must:

* take each record's state — a chained ``LedgerEntry`` applied to the state before it, or (records
  written with ``LedgerEntry.v1``) a whole ledger, of which the more advanced of it and the state
  so far is kept, in either order;
* refuse a chain spread over two partitions (their order is lost), a broken chain (naming where it
  breaks) and an edited record (its display fields disagree with its entry);
* count the records it read and remember the writer of the last entry (empty for a v1 state);
* resume from the ledger read only if it has the job's total and composition, and hand the job's
  writer the ledger it continues.

Expected values are written out here (sequences, spent ε, the exact refusal text), never produced
by the code under test. Deterministic.
"""

from __future__ import annotations

import pytest
from privstream.connectors.avro_codec import default_registry
from privstream.connectors.ledger_topic import ChainReader, LedgerUnavailable, entry_record, record_state

from privstream.accounting import Budget, LedgerFormatError, PrivacyLedger
from tests.test_ledger_partition import TopicRecord

TOTAL = Budget(4.0, 4e-6)
STEP = Budget(1.0, 1e-6)


def _ledger(ledger_id: str = "hh/spend") -> PrivacyLedger:
    return PrivacyLedger(TOTAL, composition="sequential", ledger_id=ledger_id)


def _entry_value(ledger: PrivacyLedger, writer: str = "") -> dict:
    """Charge ``ledger`` one step (by ``writer``) and return its decoded ``LedgerEntry`` record."""
    ledger.writer = writer
    entry = ledger.charge(STEP, mechanism="pmg", epoch=ledger.sequence)
    return default_registry().decode(entry_record(entry, time_ms=0))[1]


def _state_value(ledger: PrivacyLedger) -> dict:
    """A ``LedgerEntry.v1``-style record: the whole ledger state, no chained entry."""
    return {
        "ledger_id": ledger.ledger_id,
        "sequence": ledger.sequence,
        "entry": b"",
        "state": ledger.to_bytes(),
    }


def test_a_v1_record_is_its_whole_ledger_state() -> None:
    ledger = _ledger()
    ledger.charge(STEP, mechanism="pmg", epoch=0)
    got = record_state(_state_value(ledger))
    assert isinstance(got, PrivacyLedger) and got.to_bytes() == ledger.to_bytes()
    with pytest.raises(LedgerFormatError) as refused:
        record_state({"ledger_id": "hh/spend", "sequence": 1, "entry": b"", "state": b""})
    assert str(refused.value) == "LedgerEntry record without an entry or a state"


def test_an_edited_record_is_refused() -> None:
    value = _entry_value(_ledger())
    for field, edited, says in (("ledger_id", "hh/other", "'hh/other' #1"), ("sequence", 7, "'hh/spend' #7")):
        with pytest.raises(LedgerFormatError) as refused:
            record_state({**value, field: edited})
        assert str(refused.value) == (
            f"LedgerEntry record says ledger {says}, its entry ledger 'hh/spend' #1 (edited)"
        )


@pytest.mark.parametrize("order", ["older first", "newer first"])
def test_v1_states_keep_the_more_advanced_one(order: str) -> None:
    older = _ledger()
    older.charge(STEP, mechanism="pmg", epoch=0)
    newer = PrivacyLedger.from_bytes(older.to_bytes())
    newer.charge(STEP, mechanism="pmg", epoch=1)
    states = [older, newer] if order == "older first" else [newer, older]
    reader = ChainReader("hh/spend")
    for offset, state in enumerate(states):
        reader.add(TopicRecord(_state_value(state), offset))  # type: ignore[arg-type]
    assert reader.state is not None and reader.state.sequence == 2
    assert reader.state.spent().epsilon == pytest.approx(2.0)
    assert reader.entries == 2 and reader.writer == ""


def test_entries_after_a_v1_state_continue_it_and_the_last_writer_is_kept() -> None:
    ledger = _ledger()
    ledger.charge(STEP, mechanism="pmg", epoch=0)
    reader = ChainReader("hh/spend")
    reader.add(TopicRecord(_state_value(ledger), 0))  # type: ignore[arg-type]
    assert reader.writer == ""
    reader.add(TopicRecord(_entry_value(ledger, writer="job-a"), 1))  # type: ignore[arg-type]
    assert reader.writer == "job-a"
    reader.add(TopicRecord(_entry_value(ledger, writer="job-b"), 2))  # type: ignore[arg-type]
    assert reader.writer == "job-b" and reader.entries == 3
    assert reader.state is not None and reader.state.sequence == 3
    assert reader.state.spent().epsilon == pytest.approx(3.0)
    assert reader.partition == 0
    reader.add(TopicRecord(_state_value(ledger), 3))  # a v1 state again: no writer
    assert reader.writer == "" and reader.entries == 4 and reader.state.sequence == 3


def test_a_chain_over_two_partitions_is_refused_naming_both() -> None:
    ledger = _ledger()
    reader = ChainReader("hh/spend")
    reader.add(TopicRecord(_entry_value(ledger), 0, partition=2))  # type: ignore[arg-type]
    assert reader.partition == 2
    reader.add(TopicRecord(_entry_value(ledger), 1, partition=2))  # type: ignore[arg-type]
    with pytest.raises(LedgerUnavailable) as refused:
        reader.add(TopicRecord(_entry_value(ledger), 2, partition=0))  # type: ignore[arg-type]
    assert str(refused.value) == (
        "entries of ledger 'hh/spend' on partitions 2 and 0: their order is lost (was the topic "
        "repartitioned?)"
    )
    assert reader.entries == 2


def test_a_broken_chain_is_refused_naming_where() -> None:
    ledger = _ledger()
    reader = ChainReader("hh/spend")
    reader.add(TopicRecord(_entry_value(ledger), 0, partition=1))  # type: ignore[arg-type]
    _entry_value(ledger)  # entry #2 is lost: #3 does not follow #1
    with pytest.raises(LedgerUnavailable) as refused:
        reader.add(TopicRecord(_entry_value(ledger), 5, partition=1))  # type: ignore[arg-type]
    assert str(refused.value).startswith("the ledger chain is broken at partition 1 offset 5: ")
    assert reader.entries == 1


def test_the_result_is_the_ledger_read_or_the_jobs_empty_one_with_the_jobs_writer() -> None:
    empty = ChainReader("hh/spend").result(_ledger(), writer="this-job")
    assert empty.sequence == 0 and empty.writer == "this-job"
    ledger = _ledger()
    reader = ChainReader("hh/spend")
    reader.add(TopicRecord(_entry_value(ledger, writer="earlier-job"), 0))  # type: ignore[arg-type]
    resumed = reader.result(_ledger(), writer="this-job")
    assert resumed.sequence == 1 and resumed.writer == "this-job"
    assert resumed.spent().epsilon == pytest.approx(1.0)
    other = PrivacyLedger(Budget(9.0, 4e-6), composition="sequential", ledger_id="hh/spend")
    with pytest.raises(LedgerUnavailable) as refused:
        reader.result(other, writer="this-job")
    assert str(refused.value) == (
        f"ledger 'hh/spend' on the topic has total {TOTAL} and composition sequential; this job has "
        f"{other.total} and sequential. Give the same --total-epsilon/--total-delta, or a new "
        "--ledger-id for a new budget"
    )
