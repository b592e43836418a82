"""What ``privstream run`` reports (:mod:`privstream.jobs.run_report`) and the run id stamped into a
job's records (:func:`privstream.connectors.run_ids.stamp`): logic, then the monitor against the real
embedded broker on records made by the project's own release step (never hand-made bytes). The
command line with a real Flink job (banner, exit 3 on a spent budget, ``tail --run``) is
tests/test_flink_ledger_topic.py's exhausted-budget test."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from privstream.connectors.avro_codec import SchemaRegistry, decode, encode
from privstream.connectors.clients import kafka_producer
from privstream.connectors.dead_letter import dead_letter_record
from privstream.connectors.record_text import render
from privstream.connectors.run_ids import matches, new_run_id, run_ids, stamp
from privstream.jobs.run_report import (
    EXIT_NOTHING_RELEASED,
    RunCounts,
    RunMonitor,
    RunPlan,
    exit_status,
    interrupted_line,
    web_ui_settings,
)

from tests.test_cli_tail import _epochs  # the release step's messages: Release, Release, ReleaseRefused
from tests.test_release_logic import CONFIG

RUN = "3f2a9c1b0d4e4c6e8a1b2c3d4e5f6071"


def _plan(**fields: Any) -> RunPlan:
    base = {
        "job": "heavy-hitters",
        "run_id": RUN,
        "bootstrap": "127.0.0.1:9092",
        "input_topic": "events",
        "releases_topic": "releases",
        "dlq_topic": "events-dlq",
        "ledger_topic": "ledger",
        "ledger_id": CONFIG.ledger_id,
        "per_release": "(ε=1, δ=1e-06) per epoch",
        "total": "(ε=2, δ=2e-06)",
        "web_ui": "http://127.0.0.1:8081",
    }
    return RunPlan(**{**base, **fields})


# ---------------------------------------------------------------- the run id in the records


def test_stamp_sets_the_run_id_of_every_record_type_that_has_one() -> None:
    """A release, a refusal and a dead letter gain the run id (and ``tail --run`` matches it); the
    same input gives the same bytes (a replay writes identical messages); a ledger entry (no such
    field) and a record that already names a run pass unchanged."""
    releases, entries = _epochs(3)
    letter = encode(
        "DeadLetter",
        dead_letter_record(value=b"x", error="E", topic="t", partition=0, offset=1, failed_time_ms=5),
    )
    for message in [*releases, letter]:
        name, before = decode(message)
        assert before["run_id"] is None
        stamped = stamp(message, RUN)
        assert stamped == stamp(message, RUN)  # deterministic
        after = decode(stamped)
        assert after == (name, {**before, "run_id": RUN})
        assert matches(RUN, run_ids(name, after[1])) and matches(RUN[:8], run_ids(name, after[1]))
        assert not matches(new_run_id(), run_ids(name, after[1]))
        assert stamp(stamped, new_run_id()) == stamped  # already names its run
    assert [decode(m)[0] for m in releases] == ["Release", "Release", "ReleaseRefused"]
    head = render(*decode(stamp(releases[0], RUN)), "releases[0]@0")[0]  # privstream tail's text
    assert head.startswith("releases[0]@0  Release  epoch 0") and head.endswith(f"run {RUN[:12]}")
    assert stamp(entries[0], RUN) == entries[0]


def test_stamp_upgrades_a_message_of_the_previous_schema_version() -> None:
    """A Release written with ``Release.v2`` (before run ids) is stamped in the current schema."""
    from importlib import resources

    old = SchemaRegistry()
    old.register((resources.files("privstream.connectors") / "schemas" / "Release.v2.avsc").read_text())
    value = {k: v for k, v in decode(_epochs(1)[0][0])[1].items() if k != "run_id"}
    name, after = decode(stamp(old.encode("Release", value), RUN))
    assert name == "Release" and after == {**value, "run_id": RUN}


def test_new_run_ids_are_distinct_hex() -> None:
    ids = {new_run_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


# ---------------------------------------------------------------- banner, web UI, exit status


def test_banner_names_job_run_topics_budget_and_web_ui() -> None:
    lines = _plan().banner_lines()
    text = "\n".join(lines)
    assert lines[0] == f"starting heavy-hitters (run {RUN})"
    assert "input: events on 127.0.0.1:9092" in text
    assert "releases → releases, ledger → ledger, dead letters → events-dlq" in text
    assert "budget: (ε=1, δ=1e-06) per epoch; ledger 'hh/test' total (ε=2, δ=2e-06)" in text
    assert "Flink web UI: http://127.0.0.1:8081" in text
    assert f"select this run's output: privstream releases heavy-hitters --run {RUN}" in text
    assert "Flink web UI: the cluster's own" in "\n".join(_plan(web_ui=None).banner_lines())


def test_web_ui_settings_choose_a_free_rest_port_unless_one_is_set() -> None:
    settings, url = web_ui_settings(())
    port = dict(settings)["rest.bind-port"]
    assert url == f"http://127.0.0.1:{int(port)}"
    assert web_ui_settings((("rest.port", "8089"),)) == ((), "http://127.0.0.1:8089")
    assert web_ui_settings((("rest.bind-port", "50100-50200"),)) == ((), "http://127.0.0.1:50100")


def test_a_job_submitted_by_flink_run_names_no_local_web_ui(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYFLINK_GATEWAY_PORT", "12345")  # set by `flink run -py`'s Java client
    assert web_ui_settings(()) == ((), None)


def _counts(messages: list[bytes], run_id: str = RUN) -> RunCounts:
    counts = RunCounts()
    for message in messages:
        counts.add(*decode(message), run_id=run_id, ledger_id=CONFIG.ledger_id)
    return counts


def test_exit_status_three_when_every_release_was_refused() -> None:
    """All of a run's releases refused: exit 3, one line with the ledger, its spend and the way on."""
    releases, _ = _epochs(3)
    refused = stamp(releases[2], RUN)
    status, why = exit_status(_plan(), _counts([refused, refused]))
    assert status == EXIT_NOTHING_RELEASED and why is not None and "\n" not in why
    assert why.startswith(f"nothing released: all 2 releases of run {RUN} were refused")
    assert "ledger 'hh/test' has spent (ε=2) of (ε=2)" in why
    assert "start with a new --ledger-id and --total-epsilon, see `privstream ledger show hh/test`" in why
    # one release of this run is enough; other runs' refusals do not count
    assert exit_status(_plan(), _counts([stamp(releases[0], RUN), refused])) == (0, None)
    assert exit_status(_plan(), _counts([stamp(releases[2], new_run_id())])) == (0, None)


def test_exit_status_three_when_everything_was_dead_lettered() -> None:
    """Nothing released nor refused but messages dead-lettered (e.g. every shard misrouted): exit 3
    naming the commonest reason and the dead-letter topic."""
    letters = [
        stamp(
            encode(
                "DeadLetter",
                dead_letter_record(
                    value=b"x", error=f"misrouted: item hash says shard 1, message on 0 (#{i})", topic="events",
                    partition=0, offset=i,
                ),
            ),
            RUN,
        )
        for i in range(3)
    ]  # fmt: skip
    status, why = exit_status(_plan(), _counts(letters))
    assert status == EXIT_NOTHING_RELEASED and why is not None
    assert why.startswith(f"nothing released: 3 messages of run {RUN} were dead-lettered (mostly 'misrouted")
    assert f"privstream tail events-dlq --run {RUN}" in why
    assert exit_status(_plan(), RunCounts()) == (0, None)  # an empty input is not an error


# ---------------------------------------------------------------- the monitor on a real broker


def test_monitor_reads_the_runs_committed_output_and_logs_banner_progress_summary(
    kafka_broker: Any, unique_topic: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    """The monitor counts this run's releases, refusals and dead letters (not another run's), takes
    the spent budget from the ledger topic, logs the banner, a progress line and the summary."""
    releases_topic, ledger_topic = unique_topic("releases"), unique_topic("ledger", compacted=True)
    plan = _plan(
        bootstrap=kafka_broker.bootstrap,
        releases_topic=releases_topic,
        dlq_topic=f"{releases_topic}-dlq",
        ledger_topic=ledger_topic,
        web_ui=None,
    )
    releases, entries = _epochs(3)
    letter = encode(
        "DeadLetter",
        dead_letter_record(value=b"?", error="AvroDecodeError: bad magic", topic="e", partition=0, offset=0),
    )
    producer = kafka_producer(kafka_broker.bootstrap, acks="all")
    try:
        for message in [stamp(m, RUN) for m in releases] + [stamp(releases[0], new_run_id())]:
            producer.send(releases_topic, value=message).get(timeout=30)
        producer.send(f"{releases_topic}-dlq", value=stamp(letter, RUN)).get(timeout=30)
        for entry in entries:
            producer.send(ledger_topic, key=CONFIG.ledger_id.encode(), value=entry).get(timeout=30)
    finally:
        producer.close()
    caplog.set_level(logging.INFO, logger="privstream.jobs.run_report")
    monitor = RunMonitor(plan, interval_s=0.0).start(background=False)
    try:
        monitor.wait_for(lambda c: c.releases + c.refused + c.dead_letters + c.other_runs == 5 and c.ledger)
        counts = monitor.finish(idle_s=0.5)
    finally:
        monitor.close()
    assert (counts.releases, counts.refused, counts.dead_letters, counts.other_runs) == (2, 1, 1, 1)
    assert counts.ledger is not None and counts.ledger["sequence"] == 2
    logged = [r.getMessage() for r in caplog.records if r.name == "privstream.jobs.run_report"]
    assert logged[0] == f"starting heavy-hitters (run {RUN})"
    assert any(
        m.startswith("progress: ") and "2 releases written, 1 refused, 1 dead letters" in m for m in logged
    ), logged
    assert f"finished heavy-hitters (run {RUN}): 2 releases written, 1 refused, 1 dead letters" in logged
    assert "  budget: ε=2 of ε=2 spent (δ=2e-06 of δ=2e-06); ε=0 left on ledger 'hh/test'" in logged
    assert f"  releases: privstream tail {releases_topic} --run {RUN}" in logged
    assert exit_status(plan, counts) == (0, None)
    # the dead letter's kind said once, with where to read it
    told = [m for m in logged if m.startswith("dead-lettering: ")]
    assert told == [
        f"dead-lettering: AvroDecodeError: bad magic (privstream tail {releases_topic}-dlq --run {RUN})"
    ]


def test_ctrl_c_line_says_how_far_the_committed_releases_go() -> None:
    """After Ctrl-C: the last committed release's epoch (or window) and the counts, or that nothing
    was committed yet; always how to read the run's output."""
    releases, _ = _epochs(3)  # epochs 0 and 1 released, the third refused
    counts = _counts([stamp(m, RUN) for m in releases])
    assert interrupted_line(_plan(), counts) == (
        "privstream run: stopped; releases committed up to epoch 1 (2 releases, 1 refused of run "
        f"{RUN}) on 'releases' (privstream tail releases --run {RUN})"
    )
    assert interrupted_line(_plan(), RunCounts()) == (
        f"privstream run: stopped; no release of run {RUN} committed yet on 'releases' "
        f"(privstream tail releases --run {RUN})"
    )


def test_quickstart_ends_with_how_to_see_the_output() -> None:
    from privstream.jobs.quickstart import next_steps

    text = "\n".join(next_steps("releases"))
    assert "privstream tail releases" in text and "privstream dashboard" in text
    assert "privstream broker" in text and "privstream run heavy-hitters" in text
