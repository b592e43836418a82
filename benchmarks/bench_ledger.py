"""The hash-chained privacy ledger: entry size and start-up read time against ledger length.

Core (no Kafka): the size of the entry (its canonical bytes, and the Avro ``LedgerEntry`` record)
and of the ledger state after 10 / 100 / 1,000 / 10,000 charges, and the time to rebuild the state
by verifying the whole chain (``PrivacyLedger.apply``), i.e. start-up without compaction, against
resuming from the latest entry alone (start-up with compaction).

Broker (the embedded tansu broker, which does not compact): the fenced start-up read
(:func:`privstream.connectors.ledger_topic.read_ledger`) of a ledger topic holding 100 / 1,000 /
10,000 entries.

Run (the machine is shared; never run two heavy jobs at once)::

    flock /tmp/privstream-heavy.lock python benchmarks/bench_ledger.py
"""

from __future__ import annotations

import argparse
import json
import time

from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.clients import kafka_producer
from privstream.connectors.ledger_topic import entry_record, read_ledger
from privstream.connectors.topics import TopicSpec, create_topics

from privstream.accounting import Budget, LedgerEntry, PrivacyLedger

TOTAL = Budget(1e6, 0.5)  # large enough that no charge is refused
CHARGE = Budget(1.0, 1e-7)


def _ledger(ledger_id: str = "bench") -> PrivacyLedger:
    return PrivacyLedger(TOTAL, composition="parallel_epochs", ledger_id=ledger_id, writer="b" * 32)


def chain(n: int, ledger_id: str = "bench") -> list[LedgerEntry]:
    """``n`` charges of one epoch each, as the job makes them."""
    ledger = _ledger(ledger_id)
    return [ledger.charge(CHARGE, mechanism="pmg", epoch=e, label="heavy-hitters") for e in range(n)]


def core(lengths: list[int]) -> list[dict[str, float]]:
    rows = []
    for n in lengths:
        entries = chain(n)
        raw = [e.to_bytes() for e in entries]
        start = time.perf_counter()
        replayed = _ledger()
        for data in raw:
            replayed.apply(LedgerEntry.from_bytes(data))
        full_s = time.perf_counter() - start
        start = time.perf_counter()
        resumed = PrivacyLedger.from_entry(LedgerEntry.from_bytes(raw[-1]))
        latest_s = time.perf_counter() - start
        assert replayed.head == resumed.head == entries[-1]
        rows.append(
            {
                "entries": n,
                "entry_bytes": len(raw[-1]),
                "avro_record_bytes": len(entry_record(entries[-1], time_ms=0)),
                "state_bytes": len(replayed.to_bytes()),
                "verify_chain_s": full_s,
                "verify_chain_us_per_entry": 1e6 * full_s / n,
                "resume_from_latest_s": latest_s,
            }
        )
    return rows


def broker(lengths: list[int]) -> list[dict[str, float]]:
    rows = []
    with EmbeddedBroker() as embedded:
        for n in lengths:
            topic, ledger_id = f"bench-ledger-{n}", f"bench-{n}"
            create_topics(embedded.bootstrap, [TopicSpec(topic, compacted=True)])
            producer = kafka_producer(embedded.bootstrap, linger_ms=20)
            for entry in chain(n, ledger_id):
                producer.send(topic, key=ledger_id.encode(), value=entry_record(entry))
            producer.flush()
            producer.close()
            read = read_ledger(embedded.bootstrap, topic, _ledger(ledger_id), timeout_s=600)
            assert read.entries == n and PrivacyLedger.from_bytes(read.state).sequence == n
            rows.append(
                {
                    "entries": n,
                    "records_read": read.records,
                    "start_up_read_s": read.seconds,
                    "us_per_entry": 1e6 * read.seconds / n,
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", default="10,100,1000,10000", help="ledger lengths for the core part")
    parser.add_argument("--broker", default="100,1000,10000", help="ledger lengths on the broker ('' skips)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args()
    lengths = [int(x) for x in args.core.split(",") if x]
    out = {"core": core(lengths), "broker": broker([int(x) for x in args.broker.split(",") if x])}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print("core (no Kafka)")
    print(
        f"{'entries':>8} {'entry B':>8} {'Avro B':>7} {'state B':>8} {'verify chain s':>15} {'µs/entry':>9} {'resume latest s':>16}"
    )
    for r in out["core"]:
        print(
            f"{r['entries']:>8} {r['entry_bytes']:>8} {r['avro_record_bytes']:>7} {r['state_bytes']:>8} "
            f"{r['verify_chain_s']:>15.4f} {r['verify_chain_us_per_entry']:>9.1f} {r['resume_from_latest_s']:>16.6f}"
        )
    print("\nfenced start-up read on the embedded broker (no compaction: every entry is read and verified)")
    print(f"{'entries':>8} {'records':>8} {'read s':>8} {'µs/entry':>9}")
    for r in out["broker"]:
        print(
            f"{r['entries']:>8} {r['records_read']:>8} {r['start_up_read_s']:>8.3f} {r['us_per_entry']:>9.1f}"
        )


if __name__ == "__main__":
    main()
