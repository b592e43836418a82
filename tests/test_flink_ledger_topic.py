"""The job starts only from a ledger state it has provably read to the end of the ledger topic, on
the real embedded broker: a fence round trip, resuming from entries (also a version-1 record),
and refusals before Flink starts for a tampered, truncated or reordered record, a gap, a fork by a
second job, a record of an unknown format, another total, a topic held by an open transaction and
a broker that refuses connections. The last test runs the job itself (Flink): an exhausted budget
stops releases, not the job."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from importlib import resources
from typing import Any

import pytest
from privstream.connectors.avro_codec import SchemaRegistry, decode, encode
from privstream.connectors.clients import free_port, kafka_producer
from privstream.connectors.consume import read_topic
from privstream.connectors.ledger_lease import FENCE_SUFFIX, Heartbeat, LedgerLease, fence_record
from privstream.connectors.ledger_topic import LedgerUnavailable, entry_record, read_ledger
from privstream.jobs.config import HeavyHittersConfig
from privstream.jobs.job import HeavyHittersJob
from privstream.operators.release_logic import EpochReleaser, new_ledger

from privstream.accounting import Budget, LedgerEntry, PrivacyLedger
from tests.flink_fixtures import create_topic, fresh_name

pytestmark = pytest.mark.kafka

LEDGER_ID = "hh/x"


@pytest.fixture
def config(kafka_broker: Any) -> HeavyHittersConfig:
    """A user-level job (sequential composition) whose ledger total is two epochs; fresh topics."""
    return HeavyHittersConfig(
        bootstrap=kafka_broker.bootstrap,
        topic=create_topic(kafka_broker.bootstrap, fresh_name("events")),
        ledger_topic=create_topic(kafka_broker.bootstrap, fresh_name("ledger"), compacted=True),
        ledger_id=LEDGER_ID,
        epsilon=1.0,
        delta=1e-6,
        total_epsilon=2.0,
        total_delta=2e-6,
        k=8,
        epoch=10,
        m=2,
        ledger_timeout=timedelta(seconds=10),
        ledger_lease=timedelta(seconds=1),  # a start-up after another one waits at most this
        checkpoint_interval=timedelta(milliseconds=300),  # the lease must cover 3 checkpoints
    )


def _empty(config: HeavyHittersConfig) -> PrivacyLedger:
    return new_ledger(config.release, config.spec, config.policy)


def _read(config: HeavyHittersConfig, timeout_s: float = 10.0) -> Any:
    return read_ledger(
        config.bootstrap,
        config.ledger_topic,
        _empty(config),
        timeout_s=timeout_s,
        lease_s=config.ledger_lease.total_seconds(),
    )


def _send(config: HeavyHittersConfig, values: list[bytes], key: bytes = LEDGER_ID.encode()) -> None:
    producer = kafka_producer(config.bootstrap)
    for value in values:
        producer.send(config.ledger_topic, key=key, value=value)
    producer.flush()
    producer.close()


def _charges(config: HeavyHittersConfig, n: int, writer: str = "job-a") -> list[LedgerEntry]:
    ledger = _empty(config)
    ledger.writer = writer
    return [ledger.charge(Budget(1.0, 1e-6), mechanism="gshm", epoch=e) for e in range(n)]


@pytest.fixture
def refuses_before_flink(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[HeavyHittersConfig], str]]:
    """``refuses(config)``: run the job; it must refuse with LedgerUnavailable before any Flink
    environment exists. Returns the message."""
    monkeypatch.setattr("privstream.connectors.flink_jars.connector_jar_urls", lambda: [])

    def no_flink(*_: object, **__: object) -> None:
        raise AssertionError("Flink must not start when the ledger state is unknown")

    monkeypatch.setattr(HeavyHittersJob, "environment", no_flink)

    def refuses(config: HeavyHittersConfig) -> str:
        with pytest.raises(LedgerUnavailable) as info:
            HeavyHittersJob(config).run()
        message = str(info.value)
        assert message.startswith("refusing to start: ")
        return message

    yield refuses


def test_fence_round_trip_and_resume(config: HeavyHittersConfig) -> None:
    """An empty topic gives an empty ledger written by this start-up's nonce, and the fence is on
    the topic; entries (and the other records around them) give the chain's state."""
    first = _read(config)
    state = PrivacyLedger.from_bytes(first.state)
    assert (state.sequence, state.writer, first.entries) == (0, first.nonce, 0) and len(first.nonce) == 32
    fences = read_topic(config.bootstrap, config.ledger_topic, expect=1, idle_s=0.5)
    assert [(r.schema, r.key, r.value["nonce"]) for r in fences] == [
        ("LedgerFence", b"hh/x/fence", first.nonce)
    ]
    other = PrivacyLedger(Budget(5.0, 1e-5), ledger_id="other")
    _send(config, [entry_record(other.charge(Budget(1.0), mechanism="pmg"))], key=b"other")
    _send(config, [entry_record(e) for e in _charges(config, 2)])
    second = _read(config)
    state = PrivacyLedger.from_bytes(second.state)
    assert (state.sequence, second.entries, second.records) == (2, 2, 5)  # fence, other, 2, fence
    assert state.writer == second.nonce != first.nonce
    # a releaser started from it refuses the next user-level epoch: the budget is spent
    releaser = EpochReleaser(config.release, config.spec, config.policy, second.state)
    assert not releaser.ledger.can_charge(Budget(1.0, 1e-6), epoch=2)


def test_a_version_1_record_is_migrated(config: HeavyHittersConfig) -> None:
    """Ledger records written by the previous format (whole-ledger state) keep working."""
    body = {
        "format": "privstream-ledger",
        "version": 1,
        "ledger_id": LEDGER_ID,
        "total": {"kind": "dp", "epsilon": 2.0, "delta": 2e-6},
        "composition": "sequential",
        "entries": [{"seq": 0, "budget": {"kind": "dp", "epsilon": 1.0, "delta": 1e-6}, "mechanism": "gshm",
                     "epoch": 0, "label": ""}],
    }  # fmt: skip
    body["checksum"] = hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    v1 = SchemaRegistry()
    v1.register((resources.files("privstream.connectors") / "schemas" / "LedgerEntry.v1.avsc").read_text())
    record = {"ledger_id": LEDGER_ID, "sequence": 1, "epsilon_spent": 1.0, "delta_spent": 1e-6,
              "epsilon_total": 2.0, "delta_total": 2e-6, "last_charge": "gshm epoch 0",
              "state": b"PSLEDGER" + json.dumps(body).encode(), "entry_time": 0}  # fmt: skip
    _send(config, [v1.encode("LedgerEntry", record)])
    state = PrivacyLedger.from_bytes(_read(config).state)
    assert state.sequence == 1 and state.spent() == Budget(1.0, 1e-6)
    # the chain continues from the migrated state
    nxt = PrivacyLedger.from_bytes(state.to_bytes())
    _send(config, [entry_record(nxt.charge(Budget(1.0, 1e-6), mechanism="gshm", epoch=1))])
    assert PrivacyLedger.from_bytes(_read(config).state).spent() == Budget(2.0, 2e-6)


def _tampered(entry: LedgerEntry) -> bytes:
    """The entry's Avro record with its charge edited (ε 1 -> 0) inside the entry bytes."""
    value = decode(entry_record(entry))[1]
    value["entry"] = value["entry"].replace(b'"exact":["1/1"', b'"exact":["0/1"')
    assert value["entry"] != entry.to_bytes()
    return encode("LedgerEntry", value)


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("tampered", "hash mismatch"),
        ("truncated", "undecodable record"),
        ("reordered", "reordered, replayed"),  # #2 is taken as the compacted start, then #1
        ("duplicated older", "reordered, replayed"),
        ("gap", "entries are missing"),
        ("envelope edited", "edited"),
        ("second writer", "job-a.*job-b"),
        ("unknown format", "undecodable record.*unknown schema fingerprint"),
        ("foreign record", "unexpected EndMarker record"),
    ],
)
def test_a_broken_ledger_topic_refuses_the_start_before_flink(
    config: HeavyHittersConfig,
    refuses_before_flink: Callable[[HeavyHittersConfig], str],
    case: str,
    match: str,
) -> None:
    entries = _charges(config, 2)
    one, two = (entry_record(e) for e in entries)
    forked = PrivacyLedger.from_entry(entries[0], writer="job-b").charge(
        Budget(1.0, 1e-6), mechanism="gshm", epoch=1
    )
    envelope = decode(two)[1]
    later = PrivacyLedger.from_entry(entries[1])
    later.charge(Budget(0.0, 0.0), mechanism="gshm", epoch=2)
    fourth = later.charge(Budget(0.0, 0.0), mechanism="gshm", epoch=3)
    records = {
        "tampered": [one, _tampered(entries[1])],
        "truncated": [one, two[:-7]],
        "reordered": [two, one],
        "duplicated older": [one, two, one],
        "gap": [one, entry_record(fourth)],  # #1 then #4: #2 and #3 are missing
        "envelope edited": [one, encode("LedgerEntry", {**envelope, "sequence": 7})],
        "second writer": [one, two, entry_record(forked)],
        "unknown format": [b"\xc3\x01" + bytes(8) + b"body"],
        "foreign record": [encode("EndMarker", {"producer_id": "p", "events_sent": 1})],
    }[case]
    _send(config, records)
    message = refuses_before_flink(config)
    assert re.search(match, message), message
    assert config.ledger_topic in message or "ledger" in message


def test_another_total_refuses_with_the_options_to_check(
    config: HeavyHittersConfig, refuses_before_flink: Callable[[HeavyHittersConfig], str]
) -> None:
    _send(config, [entry_record(e) for e in _charges(config, 1)])
    message = refuses_before_flink(replace(config, total_epsilon=5.0))
    assert "--total-epsilon" in message and "--ledger-id" in message


def test_an_unreadable_ledger_topic_refuses_the_start(
    config: HeavyHittersConfig, refuses_before_flink: Callable[[HeavyHittersConfig], str]
) -> None:
    """An open transaction holds read_committed readers before its first record: the fence cannot
    come back, so the start is refused after the timeout (fail closed), and a broker that refuses
    connections is refused at once, naming the options to check."""
    producer = kafka_producer(config.bootstrap, transactional_id=fresh_name("txn"))
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(config.ledger_topic, key=LEDGER_ID.encode(), value=entry_record(_charges(config, 1)[0]))
    producer.flush()
    try:
        message = refuses_before_flink(replace(config, ledger_timeout=timedelta(seconds=3)))
        assert "not read to its end within 3 s" in message and "open transaction" in message
        assert "--ledger-timeout" in message
    finally:
        producer.abort_transaction()
        producer.close()
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(LedgerUnavailable, match=f"cannot be read.*--bootstrap {dead}"):
        read_ledger(dead, config.ledger_topic, _empty(config), timeout_s=5)
    with pytest.raises(LedgerUnavailable, match="does not exist.*--ledger-topic"):
        read_ledger(config.bootstrap, fresh_name("no-such-ledger"), _empty(config), timeout_s=5)


def test_the_command_line_prints_why_it_refuses(
    config: HeavyHittersConfig, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from privstream.jobs import heavy_hitters

    monkeypatch.setattr("privstream.connectors.flink_jars.connector_jar_urls", lambda: [])
    _send(config, [b"\x00garbage"])
    argv = [
        "--bootstrap", config.bootstrap, "--topic", config.topic, "--ledger-topic", config.ledger_topic,
        "--ledger-id", LEDGER_ID, "--epsilon", "1", "--delta", "1e-6", "--k", "8", "--epoch", "10",
        "--ledger-timeout", "10s",
    ]  # fmt: skip
    assert heavy_hitters.main(argv) == 2
    # one error line (after whatever the console logged before the ledger read, e.g. the pre-flight)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    assert errors[0].startswith("error: refusing to start: an undecodable record on ledger topic")
    assert f"--ledger-topic {config.ledger_topic}" in errors[0]


@pytest.mark.flink
def test_an_exhausted_budget_stops_releases_not_the_job(hh_stream: Any) -> None:
    """Run the job twice over the same stream and ledger id (event level, total = one epoch's ε):
    the second start reads the first run's ledger through its fence, every epoch it sees again is
    refused with a "budget exhausted" ReleaseRefused (no new charge, no new entry), and the job
    still consumes everything and ends normally; the chain on the topic stays intact.

    The second run goes through the command line (``tests/jobs/seeded_heavy_hitters.py``: the
    heavy-hitters ``main`` with the test hooks) in a child process: it logs its start banner (run
    id, topics, budget, Flink web UI), and, having released nothing, exits 3 with one line saying why
    and what to do. Every record carries its run's id, and ``privstream tail --run`` selects one run."""
    import subprocess
    import sys
    from pathlib import Path

    from privstream.operators.release_logic import BUDGET_EXHAUSTED

    from tests.flink_fixtures import NOISE_SEED, clean_env, job_config, seeded

    prefix = fresh_name("exhaust")
    config = job_config(hh_stream, prefix)
    figures: dict[str, Any] = {"events produced": len(hh_stream.items)}
    first = HeavyHittersJob(config, hooks=seeded(prefix))
    first.run()
    script = Path(__file__).parent / "jobs" / "seeded_heavy_hitters.py"
    options = [
        "--bootstrap", config.bootstrap, "--topic", config.topic, "--epsilon", "1", "--delta", "1e-6",
        "--k", str(config.k), "--epoch", str(config.epoch), "--releases-topic", config.releases_topic,
        "--ledger-topic", config.ledger_topic, "--dlq-topic", config.dlq, "--ledger-id", config.release.ledger_id,
        "--checkpoint-interval", "500ms", "--ledger-lease", "3s", "--stop-at-end-markers",
    ]  # fmt: skip
    second = subprocess.run(
        [sys.executable, str(script), str(NOISE_SEED), f"{prefix}-sketches", *options],
        capture_output=True, text=True, timeout=600, env=clean_env(),
    )  # fmt: skip
    published = read_topic(config.bootstrap, config.releases_topic, expect=6, idle_s=2.0)
    sketches = read_topic(config.bootstrap, f"{prefix}-sketches", expect=18, idle_s=1.0)
    for run in (1, 2):
        figures[f"run {run}: events counted"] = sum(s.value["n"] for s in sketches[9 * (run - 1) : 9 * run])
    schemas = [r.schema for r in published]
    assert schemas == ["Release"] * 3 + ["ReleaseRefused"] * 3, schemas
    # the second run: its banner, then exit 3 and one line naming the spent ledger and the way on
    assert second.returncode == 3, second.stderr[-3000:]
    err = second.stderr
    second_run = re.search(r"starting heavy-hitters \(run ([0-9a-f]{32})\)", err)
    assert second_run, err[-3000:]
    run_id = second_run.group(1)
    assert f"input: {config.topic} on {config.bootstrap}" in err
    assert f"releases → {config.releases_topic}, ledger → {config.ledger_topic}" in err
    assert re.search(r"Flink web UI: http://127\.0\.0\.1:\d+", err)
    assert f"privstream releases heavy-hitters --run {run_id}" in err
    why = [line for line in err.splitlines() if "nothing released" in line]
    assert len(why) == 1, err[-3000:]
    assert f"ledger 'test/{prefix}' has spent (ε=1) of (ε=1)" in why[0]
    assert "start with a new --ledger-id and --total-epsilon" in why[0]
    assert f"privstream ledger show test/{prefix}" in why[0]
    assert f"finished heavy-hitters (run {run_id}): 0 releases written, 3 refused" in err
    # every record names its run: the first run's releases, the second's refusals
    assert [r.value["run_id"] for r in published] == [first.run_id] * 3 + [run_id] * 3
    tail = subprocess.run(
        [sys.executable, "-m", "privstream.cli", "tail", config.releases_topic, "--run", run_id,
         "--bootstrap", config.bootstrap, "--idle", "1", "--json"],
        capture_output=True, text=True, timeout=120, env=clean_env(),
    )  # fmt: skip
    assert tail.returncode == 0, tail.stderr
    print("\n" + "\n".join(line for line in err.splitlines() if line.startswith("privstream:")))
    assert [json.loads(line)["schema"] for line in tail.stdout.splitlines()] == ["ReleaseRefused"] * 3
    refused = [r.value for r in published[3:]]
    assert [r["epoch"] for r in refused] == [0, 1, 2]
    assert all(r["reason"] == BUDGET_EXHAUSTED and r["epsilon_spent"] == 1.0 for r in refused)
    # at least the 3 entries and each start's fence, then whatever else arrives within 1 s
    ledger = read_topic(config.bootstrap, config.ledger_topic, expect=5, idle_s=1.0)
    entries = [r.value for r in ledger if r.schema == "LedgerEntry"]
    assert [e["sequence"] for e in entries] == [1, 2, 3]  # the refusals charged nothing
    fences = [r.value for r in ledger if r.schema == "LedgerFence"]
    first_writer = LedgerEntry.from_bytes(entries[0]["entry"]).writer
    beats = [f for f in fences if f["nonce"] == first_writer]
    assert len({f["nonce"] for f in fences}) == 2  # one writer per start
    assert len(beats) >= 2  # the first run's fence and its release operator's heartbeats
    after = read_ledger(
        config.bootstrap,
        config.ledger_topic,
        new_ledger(config.release, config.spec, config.policy),
        lease_s=3.0,
    )
    state = PrivacyLedger.from_bytes(after.state)
    assert state.sequence == 3 and state.spent() == Budget(1.0, 1e-6)  # the chain verifies
    figures.update(
        releases=3,
        refused=len(refused),
        ledger_entries=len(entries),
        fences_and_heartbeats=len(fences),
        start_up_read_s=after.seconds,
    )
    assert figures["run 1: events counted"] == figures["run 2: events counted"] == len(hh_stream.items)
    print(f"\nexhausted-budget run figures: {figures}")


def test_a_live_writer_refuses_a_second_start(config: HeavyHittersConfig, refuses_before_flink) -> None:
    """A writer whose heartbeats go on (the release operator's :class:`Heartbeat`, here outside Flink)
    makes a second start-up with the same ledger id refuse, naming it; once the heartbeats stop, a
    start-up waits out the lease and proceeds."""
    lease = LedgerLease(
        config.bootstrap,
        config.ledger_topic,
        LEDGER_ID,
        "job-a",
        "first job",
        config.ledger_lease.total_seconds(),
    )
    heartbeat = Heartbeat(lease).start()
    try:
        message = refuses_before_flink(config)
        assert f"another job with ledger id {LEDGER_ID!r} is running" in message
        assert "writer job-a (job 'first job'" in message and "--ledger-lease" in message
        assert heartbeat.beats >= 1
    finally:
        heartbeat.stop()
    read = _read(config)  # the writer fell silent: gone
    assert PrivacyLedger.from_bytes(read.state).sequence == 0


def test_old_and_silent_writers_do_not_block_a_start(
    config: HeavyHittersConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """A fence older than the lease is ignored; a recent one whose writer never writes again is
    waited out (the start-up waits, then proceeds); another ledger's heartbeats are ignored."""
    now = int(time.time() * 1000)
    key = (LEDGER_ID + FENCE_SUFFIX).encode()
    _send(config, [fence_record(LEDGER_ID, "stale", "old job", time_ms=now - 60_000)], key=key)
    _send(config, [fence_record(LEDGER_ID, "silent", "refused job")], key=key)
    other = LedgerLease(config.bootstrap, config.ledger_topic, "other", "job-b", "other ledger", 1.0)
    heartbeat = Heartbeat(other).start()
    try:
        with caplog.at_level("WARNING", logger="privstream.connectors.ledger_lease"):
            read = _read(config)
    finally:
        heartbeat.stop()
    assert PrivacyLedger.from_bytes(read.state).writer == read.nonce
    waits = [r.getMessage() for r in caplog.records if "waiting up to" in r.getMessage()]
    assert len(waits) == 1 and "writer silent" in waits[0]  # not "stale", not the other ledger's


@pytest.mark.parametrize("partitions", [1, 3])
def test_two_simultaneous_start_ups_one_refuses(config: HeavyHittersConfig, partitions: int) -> None:
    """Two start-ups at once (each heartbeats half a lease after its read returns, as a slow
    launcher might): exactly one proceeds and the other refuses, also when the fences interleave
    differently on the partitions of the ledger topic. Liveness is decided on partition 0 alone,
    and a fence behind a start-up's own is a later start-up's: were it watched, both would wait
    for each other's heartbeat, see none within the lease, and both start."""
    import threading

    lease_s = 3.0  # the slow launcher leaves 1.5 s of slack to a loaded machine's scheduling
    topic = create_topic(config.bootstrap, fresh_name("ledger"), partitions, compacted=True)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    heartbeats: list[Heartbeat] = []

    def start_up(name: str) -> None:
        barrier.wait()
        try:
            read = read_ledger(config.bootstrap, topic, _empty(config), timeout_s=20, lease_s=lease_s)
        except LedgerUnavailable as exc:
            outcomes.append(f"refused: {exc}")
            return
        lease = LedgerLease(config.bootstrap, topic, LEDGER_ID, read.nonce, name, lease_s)
        time.sleep(lease_s / 2)
        heartbeats.append(Heartbeat(lease).start())
        outcomes.append("started")

    threads = [threading.Thread(target=start_up, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for heartbeat in heartbeats:
        heartbeat.stop()
    assert sorted(o.split(":")[0] for o in outcomes) == ["refused", "started"], outcomes
    assert any("another job with ledger id" in o for o in outcomes)
