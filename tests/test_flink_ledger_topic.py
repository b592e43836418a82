"""A new job starts from the budget already spent: the launcher reads the compacted ledger topic."""

from __future__ import annotations

import pytest
from privstream.connectors.avro_codec import encode
from privstream.connectors.clients import kafka_producer
from privstream.connectors.scans import latest_ledger
from privstream.jobs.config import HeavyHittersConfig
from privstream.operators.release_logic import EpochReleaser

from privstream.accounting import Budget, PrivacyLedger
from tests.flink_fixtures import create_topic, fresh_name

pytestmark = pytest.mark.kafka


def _entry(ledger: PrivacyLedger, ledger_id: str) -> bytes:
    spent = ledger.spent()
    return encode(
        "LedgerEntry",
        {
            "ledger_id": ledger_id,
            "sequence": len(ledger.entries),
            "epsilon_spent": spent.epsilon,
            "delta_spent": spent.delta,
            "epsilon_total": 2.0,
            "delta_total": 2e-6,
            "last_charge": "test",
            "state": ledger.to_bytes(),
            "entry_time": 0,
        },
    )


def test_latest_committed_ledger_state_is_resumed(kafka_broker) -> None:
    topic = create_topic(kafka_broker.bootstrap, fresh_name("ledger"), compacted=True)
    config = HeavyHittersConfig(
        bootstrap=kafka_broker.bootstrap,
        ledger_topic=topic,
        ledger_id="hh/x",
        epsilon=1.0,
        delta=1e-6,
        total_epsilon=2.0,
        total_delta=2e-6,
        k=8,
        epoch=10,
        m=2,
    )

    def read(idle_s: float) -> bytes | None:
        return latest_ledger(config.bootstrap, config.ledger_topic, config.release.ledger_id, idle_s=idle_s)

    assert read(0.5) is None
    assert latest_ledger(config.bootstrap, fresh_name("no-such-topic"), "hh/x", idle_s=0.5) is None
    ledger = PrivacyLedger(Budget(2.0, 2e-6), ledger_id="hh/x")
    producer = kafka_producer(kafka_broker.bootstrap)
    other = PrivacyLedger(Budget(2.0, 2e-6), ledger_id="other")
    producer.send(topic, key=b"other", value=_entry(other, "other"))
    for epoch in (0, 1):
        ledger.charge(Budget(1.0, 1e-6), mechanism="gshm", epoch=epoch)
        producer.send(topic, key=b"hh/x", value=_entry(ledger, "hh/x"))
    producer.flush()
    producer.close()
    state = read(1.0)
    assert state is not None and len(PrivacyLedger.from_bytes(state).entries) == 2
    # a releaser started from it refuses the next user-level epoch: the budget is spent
    releaser = EpochReleaser(config.release, config.spec, config.policy, state)
    assert not releaser.ledger.can_charge(Budget(1.0, 1e-6), epoch=2)
