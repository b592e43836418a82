"""``privstream tail`` / ``releases`` / ``ledger show`` through subprocess against the real embedded
broker, on records made by the project's own release step and ledger (never hand-made bytes)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.clients import kafka_producer
from privstream.connectors.ledger_topic import entry_record
from privstream.connectors.run_ids import stamp
from privstream.operators.epochs import TimeEpochs
from privstream.operators.release_logic import EpochReleaser

from privstream.accounting import Budget, LedgerEntry, PrivacyLedger
from tests.flink_fixtures import ctrl_c_reaches_the_child
from tests.test_release_logic import CONFIG, SPEC, _merged  # epochs where items 1, 2 and 5 are heavy


def _send(bootstrap: str, topic: str, values: list[bytes], key: bytes | None = None) -> None:
    producer = kafka_producer(bootstrap, acks="all")
    try:
        for value in values:
            producer.send(topic, value=value, key=key).get(timeout=30)
    finally:
        producer.close()


def _epochs(epochs: int) -> tuple[list[bytes], list[bytes]]:
    """The release step's output for ``epochs`` epochs of one job: (releases-topic messages —
    Release, then ReleaseRefused once the 2-epoch budget is spent —, LedgerEntry messages)."""
    budget = Budget(CONFIG.total_epsilon, CONFIG.total_delta)
    sequential = PrivacyLedger(budget, composition="sequential", ledger_id=CONFIG.ledger_id)
    releaser = EpochReleaser(CONFIG, SPEC, TimeEpochs(60_000), ledger_bytes=sequential.to_bytes())
    releases, entries = [], []
    for epoch in range(epochs):
        message, entry = releaser.release(_merged(epoch))
        assert message is not None
        releases.append(message)
        entries += [] if entry is None else [entry]
    return releases, entries


def _cli(*args: str, bootstrap: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRIVSTREAM_BOOTSTRAP": bootstrap} if bootstrap else None
    return subprocess.run(
        [sys.executable, "-m", "privstream.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_tail_shows_a_releases_items_guarantee_and_error_bound(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """The default bootstrap comes from PRIVSTREAM_BOOTSTRAP; every record type on the topic is
    decoded: the Release with its items, its guarantee in one line and its error bound, and the
    ReleaseRefused with its reason."""
    topic = unique_topic("releases")
    releases, _ = _epochs(3)  # epochs 0, 1 released; epoch 2 refused (budget spent)
    _send(kafka_broker.bootstrap, topic, releases)
    out = _cli("tail", topic, "--idle", "1", bootstrap=kafka_broker.bootstrap)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    heads = [line for line in lines if line.startswith(f"{topic}[0]@")]
    assert [h.split()[1] for h in heads] == ["Release", "Release", "ReleaseRefused"]
    assert heads[0].split()[2:4] == ["epoch", "0"] and "window 1970-01-01 00:00:00.000 UTC" in heads[0]
    guarantee = next(line for line in lines if "guarantee:" in line)
    assert "(ε=1, δ=1e-06)-DP" in guarantee and "add/remove one event" in guarantee
    assert any(line.strip().startswith("error bound: -") for line in lines)
    table = lines[lines.index(next(x for x in lines if "noisy count" in x)) + 1 :]
    assert table[0].split()[0] == "1" and int(table[0].split()[1].replace(",", "")) > 500  # item 1 is heavy
    assert "REFUSED: budget exhausted" in heads[2]
    assert out.stderr.strip().endswith(f"3 records from {topic!r} (read_committed)")


def test_tail_json_lines_parse_and_run_selects_one_ledger(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """--json: one JSON object per record; --run with a ledger id keeps that ledger's records and
    says what it left out (a Release names no run today); --limit stops early."""
    topic = unique_topic("mixed")
    releases, entries = _epochs(3)
    _send(
        kafka_broker.bootstrap, topic, [*releases, *entries, b"not avro, a plain text"]
    )  # and one undecodable message
    out = _cli("tail", topic, "--bootstrap", kafka_broker.bootstrap, "--json", "--idle", "1")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    kinds = ["Release"] * 2 + ["ReleaseRefused"] + ["LedgerEntry"] * 2 + ["Undecodable"]
    assert [r["schema"] for r in records] == kinds
    assert "bad magic" in records[5]["value"]["error"]  # shown in its place, never a crash
    assert records[0]["value"]["items"][0] == {"item": 1, "count": records[0]["value"]["items"][0]["count"]}
    assert isinstance(records[3]["value"]["entry"], str)  # bytes as hex
    entry_hash = LedgerEntry.from_bytes(bytes.fromhex(records[4]["value"]["entry"])).entry_hash
    chosen = _cli(
        "tail", topic, "--bootstrap", kafka_broker.bootstrap, "--json", "--idle", "1", "--run", "hh/test"
    )
    assert [json.loads(x)["schema"] for x in chosen.stdout.splitlines()] == [
        "ReleaseRefused",
        "LedgerEntry",
        "LedgerEntry",
    ]
    assert "--run: left out 2 Release, 1 Undecodable" in chosen.stderr
    one = _cli(
        "tail",
        topic,
        "--bootstrap",
        kafka_broker.bootstrap,
        "--json",
        "--run",
        entry_hash[:10],
        "--limit",
        "1",
    )
    assert [json.loads(x)["value"]["sequence"] for x in one.stdout.splitlines()] == [2]


@contextmanager
def _following(*args: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "privstream.cli", "tail", "--follow", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_reaches_the_child,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _line_with(process: subprocess.Popen[str], text: str, timeout_s: float = 60) -> str:
    """The first stdout line of ``process`` containing ``text`` (waits on the output, not on time)."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if selector.select(timeout=deadline - time.monotonic()):
            line = process.stdout.readline()
            if not line:
                break  # the process ended
            if text in line:
                return line
    raise AssertionError(
        f"no line with {text!r}; stderr: {process.stderr.read() if process.poll() is not None else ''}"
    )


def test_tail_follow_prints_a_record_produced_after_it_started_and_stops_on_ctrl_c(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic("follow")
    first, second = _epochs(2)[0]
    _send(kafka_broker.bootstrap, topic, [first])
    with _following(topic, "--bootstrap", kafka_broker.bootstrap) as process:
        assert "epoch 0" in _line_with(process, "Release")  # it is reading
        _send(kafka_broker.bootstrap, topic, [second])
        assert "epoch 1" in _line_with(process, "Release")
        process.send_signal(signal.SIGINT)  # Ctrl-C
        assert process.wait(timeout=30) == 130
        stderr = process.stderr.read()  # type: ignore[union-attr]
    assert stderr.strip().splitlines() == ["privstream tail: stopped"]


def test_tail_into_a_reader_that_stops_early_ends_quietly(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    """``privstream tail … | head``: once the reader has gone, tail stops without a traceback
    (exit 141, the shell's 128 + SIGPIPE). 400 releases print far more than a pipe holds."""
    topic = unique_topic("piped")
    releases, _ = _epochs(2)
    _send(kafka_broker.bootstrap, topic, [stamp(releases[i % 2], f"run-{i:04d}") for i in range(400)])
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "privstream.cli",
            "tail",
            topic,
            "--bootstrap",
            kafka_broker.bootstrap,
            "--idle",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith(f"{topic}[0]@")  # `head -1`
    process.stdout.close()
    assert process.wait(timeout=60) == 141
    assert "Traceback" not in process.stderr.read()


def test_releases_reads_the_jobs_default_topic(kafka_broker: EmbeddedBroker) -> None:
    """``privstream releases sliding-window`` reads 'window-releases' (the job's --releases-topic
    default); an empty topic ends with 0 records, exit 0."""
    from privstream.connectors.topics import TopicSpec, create_topics

    create_topics(kafka_broker.bootstrap, [TopicSpec("window-releases")])
    out = _cli("releases", "sliding-window", "--bootstrap", kafka_broker.bootstrap, "--idle", "0.5")
    assert out.returncode == 0 and "0 records from 'window-releases'" in out.stderr
    missing = _cli("releases", "ldp-heavy-hitters", "--bootstrap", kafka_broker.bootstrap, "--idle", "0.5")
    assert missing.returncode == 2 and "'ldp-releases' does not exist" in missing.stderr


def _charges(ledger_id: str, budgets: list[float]) -> list[bytes]:
    """LedgerEntry messages of ``budgets`` charged in turn (epoch i) to a (ε=4, δ=4e-6) ledger."""
    ledger = PrivacyLedger(Budget(4.0, 4e-6), composition="sequential", ledger_id=ledger_id, writer="job-a")
    entries = []
    for epoch, epsilon in enumerate(budgets):
        entry = ledger.charge(Budget(epsilon, 1e-6), mechanism="gshm", epoch=epoch, label="test")
        entries.append(entry_record(entry, time_ms=1_700_000_000_000 + epoch * 60_000))
    return entries


def _ledger_show(bootstrap: str, topic: str, ledger_id: str) -> subprocess.CompletedProcess[str]:
    return _cli("ledger", "show", ledger_id, "--ledger-topic", topic, "--bootstrap", bootstrap, "--idle", "1")


def test_ledger_show_prints_spent_and_remaining_and_the_charges(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic("ledger", compacted=True)
    _send(kafka_broker.bootstrap, topic, _charges("demo", [0.5, 1.0, 0.25]), key=b"demo")
    _send(kafka_broker.bootstrap, topic, _charges("other", [1.0]), key=b"other")
    out = _ledger_show(kafka_broker.bootstrap, topic, "demo")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "3 charges read, head #3, chain verified" in text
    assert "spent     ε = 1.75 (= 7/4)" not in text  # a short decimal shows once
    assert "spent     ε = 1.75   δ = 3e-06" in text
    assert "remaining ε = 2.25   δ = 1e-06" in text
    assert "total     ε = 4   δ = 4e-06" in text
    rows = [line.split() for line in text.splitlines() if line.strip().split()[:1] in (["1"], ["2"], ["3"])]
    assert [(r[0], r[4], r[5], r[6], r[8]) for r in rows] == [
        ("1", "0", "gshm", "0.5", "0.5"),
        ("2", "1", "gshm", "1", "1.5"),
        ("3", "2", "gshm", "0.25", "1.75"),
    ]
    absent = _ledger_show(kafka_broker.bootstrap, topic, "nope")
    assert absent.returncode == 1 and "ledgers there: demo, other" in absent.stderr


def test_ledger_show_of_a_broken_chain_says_why_in_one_line(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic("ledger", compacted=True)
    first, _, third = _charges("gap", [0.5, 0.5, 0.5])
    _send(kafka_broker.bootstrap, topic, [first, third], key=b"gap")  # entry #2 missing
    out = _ledger_show(kafka_broker.bootstrap, topic, "gap")
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert "the ledger chain is broken at partition 0 offset 1" in out.stderr and "a gap" in out.stderr


@pytest.mark.parametrize("command", [["tail", "x"], ["ledger", "show", "x"]])
def test_an_unreachable_broker_is_one_line(command: list[str]) -> None:
    out = _cli(*command, "--bootstrap", "127.0.0.1:1")
    assert (
        out.returncode == 2
        and out.stderr.strip().count("\n") == 0
        and "127.0.0.1:1 is unreachable" in out.stderr
    )


def test_the_other_jobs_records_read_as_text() -> None:
    """A count-window ``WindowRelease`` (made by the sliding-window job's shard logic) shows stream
    positions, not dates; an ``LdpRelease`` (the LDP server's) its deployment, epoch, guarantee and
    items; a ``DeadLetter`` its reason and where the message was."""
    from privstream.connectors.avro_codec import decode
    from privstream.connectors.record_text import render
    from privstream.operators.ldp_logic import LdpServerLogic

    from tests.test_dashboard_browser import window_releases
    from tests.test_ldp_job_logic import _settings, _stream

    schema, window = decode(window_releases()[0])
    head, *lines = render(schema, window, "w[0]@0")
    assert f"({window['windowing']}) positions {window['window_start']}..{window['position']}" in head, head
    assert "1970" not in head and any("heavy hitters" in line for line in lines)
    outputs: list[tuple[str, bytes]] = []
    _stream(LdpServerLogic(_settings(deployment="tail")), seed=1, n=60, outputs=outputs)
    (release,) = [decode(data) for kind, data in outputs if kind == "release"]
    head, *lines = render(*release, "l[0]@0")
    assert head.startswith("l[0]@0  LdpRelease  deployment tail hg-cnr epoch 1  50 reports"), head
    assert any("ε=2" in line for line in lines) and f"  {len(release[1]['items'])} items:" in lines
    from privstream.connectors.dead_letter import dead_letter_record

    letter = dead_letter_record(
        value=b"?", error="undecodable: bad magic", topic="events", partition=1, offset=7
    )
    head, *lines = render("DeadLetter", letter, "d[0]@0")
    text = "\n".join([head, *lines])
    assert "undecodable: bad magic" in text and "events" in text and "7" in text, text
