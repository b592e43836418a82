"""A parallel-epochs ledger is bound to one epoch partition (fail closed).

Epoch numbers name disjoint slices of the data only under one partition: epoch 3 of 1-minute
epochs (minute 3) lies inside epoch 0 of 10-minute epochs. A ledger composing both by epoch number
would charge an event in both slices as if they were disjoint (max instead of sum) and under-count.
The partition is therefore part of the ledger's identity, and a graph with another partition is
refused before it charges anything.
"""

from __future__ import annotations

import pytest
from privstream.connectors.avro_codec import default_registry
from privstream.connectors.ledger_topic import ChainReader, LedgerUnavailable, entry_record
from privstream.operators.epochs import CountEpochs, TimeEpochs
from privstream.operators.release_logic import ReleaseConfig, new_ledger
from privstream.operators.sketch_spec import SketchSpec

from privstream.accounting import Budget, PrivacyLedger, is_parallel, parallel_epochs

CONFIG = ReleaseConfig(epsilon=1.0, delta=1e-6, total_epsilon=2.0, total_delta=2e-6, ledger_id="hh/shared")
SPEC = SketchSpec("mg", 16)


class TopicRecord:
    """What the Kafka consumer hands ChainReader.add: partition, offset and the decoded value."""

    def __init__(self, value: dict, offset: int, partition: int = 0) -> None:
        self.value, self.offset, self.partition = value, offset, partition


def _topic_state(policy: CountEpochs | TimeEpochs, epochs: list[int]) -> ChainReader:
    """A ledger topic as a job with ``policy`` leaves it after charging ``epochs``, read back."""
    ledger = new_ledger(CONFIG, SPEC, policy)
    reader = ChainReader(CONFIG.ledger_id)
    registry = default_registry()
    for offset, epoch in enumerate(epochs):
        entry = ledger.charge(Budget(1.0, 1e-6), mechanism="pmg", epoch=epoch)
        _, value = registry.decode(entry_record(entry, time_ms=0))
        reader.add(TopicRecord(value, offset))  # type: ignore[arg-type]
    return reader


def test_the_job_ledger_names_its_epoch_boundaries() -> None:
    assert new_ledger(CONFIG, SPEC, TimeEpochs(60_000, 5_000)).composition == "parallel_epochs/time:60000ms"
    assert new_ledger(CONFIG, SPEC, CountEpochs(1000)).composition == "parallel_epochs/count:1000"
    user_level = SketchSpec("pamg", 16, m=2)
    assert new_ledger(CONFIG, user_level, TimeEpochs(60_000)).composition == "sequential"


def test_another_partition_is_refused_before_any_charge_naming_both() -> None:
    """A graph of 10-minute epochs may not charge the ledger 1-minute epochs charged: epochs 0 and 1
    of the minute ledger are inside epoch 0 of the 10-minute one."""
    minutes = _topic_state(TimeEpochs(60_000), [0, 1])
    assert minutes.state is not None and minutes.state.spent().epsilon == pytest.approx(1.0)
    with pytest.raises(LedgerUnavailable) as refused:
        minutes.result(new_ledger(CONFIG, SPEC, TimeEpochs(600_000)), writer="w")
    assert "parallel_epochs/time:60000ms" in str(refused.value)
    assert "parallel_epochs/time:600000ms" in str(refused.value)
    with pytest.raises(LedgerUnavailable):  # count epochs cut other slices too
        _topic_state(CountEpochs(100), [0]).result(new_ledger(CONFIG, SPEC, CountEpochs(200)), writer="w")
    # the same boundaries (lateness moves none) continue the same ledger and its spend
    same = minutes.result(new_ledger(CONFIG, SPEC, TimeEpochs(60_000, lateness_ms=10_000)), writer="w")
    assert same.sequence == 2 and same.spent().epsilon == pytest.approx(1.0)


def test_partitioned_composition_composes_in_parallel_and_survives_a_round_trip() -> None:
    ledger = PrivacyLedger(Budget(1.0, 1e-6), composition=parallel_epochs("time:1000ms"), ledger_id="p")
    for epoch in range(5):
        ledger.charge(Budget(1.0, 1e-6), mechanism="pmg", epoch=epoch)  # disjoint epochs: max, not sum
    again = PrivacyLedger.from_bytes(ledger.to_bytes())
    assert again.composition == "parallel_epochs/time:1000ms" and again.spent().epsilon == pytest.approx(1.0)
    # the partition is part of the identity: another partition's genesis differs
    other = PrivacyLedger(Budget(1.0, 1e-6), composition=parallel_epochs("time:2000ms"), ledger_id="p")
    plain = PrivacyLedger(Budget(1.0, 1e-6), composition="parallel_epochs", ledger_id="p")
    assert len({other.head_hash, plain.head_hash, PrivacyLedger(Budget(1.0, 1e-6), composition=parallel_epochs("time:1000ms"), ledger_id="p").head_hash}) == 3  # fmt: skip
    assert is_parallel("parallel_epochs") and is_parallel("parallel_epochs/count:5")
    assert not is_parallel("sequential") and not is_parallel("parallel_epochsX")


@pytest.mark.parametrize("bad", ["", "a\nb", None])
def test_a_bad_partition_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="partition"):
        parallel_epochs(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="composition"):
        PrivacyLedger(Budget(1.0, 1e-6), composition="parallel_epochs/")
