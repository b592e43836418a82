"""The ``sliding-window`` Flink job on the embedded broker: one run with an injected failure after a
checkpoint that holds sketch state. Every release (one per shard and substream) is committed once,
or, since the embedded broker still shows records of aborted transactions to ``read_committed``
readers (docs/stack-facts.md), all its copies are identical (keyed noise); each equals a Flink-free
reference — the core DPSW-Sketch (Wang–Wang–Chen KDD 2024) fed the shard's items under the same
key — and the state after every release, also after the restore, is byte-identical to the core's.
The ledger holds exactly one charge for the run, which every release names.

A second run uses ``--windowing event-time``: the producer writes ``EpochWatermark`` punctuations on
the public schedule of ``privstream produce --punctuate-every`` (one per substream) to every
partition, plus one late and one far-future event; with a failure injected after a checkpoint, the
committed releases (one per shard and punctuation that completes a substream) and dead letters
equal the Flink-free logic run on the same messages (the same injected submission key)."""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode
from privstream.connectors.clients import free_port
from privstream.connectors.ledger_topic import record_state
from privstream.jobs.sliding_window import SlidingWindowConfig, start
from privstream.operators.test_hooks import TestHooks
from privstream.operators.window_logic import WindowSettings, WindowShardLogic

from privstream.window import DPSWSketch
from tests.flink_fixtures import (
    PhasedProducer,
    assert_subtasks_read,
    create_topic,
    fields_but,
    fresh_name,
    one_per,
    privstream_metrics,
    produce_stream,
    read_distinct,
    read_topic,
    wait_for_metrics,
)

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]

KEY = bytes(range(100, 132))  #: the injected submission key (production: the launcher's CSPRNG secret)
SHARDS, EVENTS, W, WINDOW, DOMAIN, GAMMA = 2, 8000, 250, 1000, 2001, 0.05
QUERIES = (1, 2, 3, 10, 100)


def _config(
    settings: WindowSettings,
    bootstrap: str,
    prefix: str,
    topic: str,
    tmp_path: Path,
    fail_after: int,
    states_topic: str | None = None,
) -> SlidingWindowConfig:
    """The job on fresh topics, checkpointing every 500 ms, failing once after shard 0 has counted
    ``fail_after`` items."""
    return SlidingWindowConfig(
        settings,
        bootstrap=bootstrap,
        topic=topic,
        releases_topic=f"{prefix}-releases",
        dlq_topic=f"{prefix}-dlq",
        ledger_topic=f"{prefix}-ledger",
        ledger_id=f"sliding-window/{prefix}",
        checkpoint_interval=timedelta(milliseconds=500),
        hooks=TestHooks(
            fail_marker=str(tmp_path / "failed"), fail_after=fail_after, expose_states_topic=states_topic
        ),
        run_id=prefix,  # stamped into every release and dead letter (privstream tail --run)
        flink_conf=(("rest.port", str(free_port())),),
    )


def count_settings() -> WindowSettings:
    """The count-window job's settings (W = 250 items, the injected submission key)."""
    return WindowSettings(
        window=WINDOW, substream=W, checkpoints=(W, 16, 1), budget_ratio=0.5, depth=3, width=128,
        epsilon=1.0, delta=1e-6, domain_size=DOMAIN, gamma=GAMMA, shards=SHARDS, queries=QUERIES,
        submission_key=KEY,
    )  # fmt: skip


def _assert_releases_are_the_cores(
    by_substream: dict,
    items: dict[int, np.ndarray],
    config: SlidingWindowConfig,
    snapshots: dict | None = None,
) -> None:
    """Every shard's release k (and, with ``snapshots``, its state) equals the core DPSW-Sketch fed
    the shard's first (k + 1)·W items under the shard's key (HMAC of the submission key)."""
    settings = config.settings
    for p in range(SHARDS):
        key = hmac.new(KEY, f"privstream sliding-window shard {p}".encode(), hashlib.sha256).digest()
        ref = DPSWSketch(settings.params, domain=range(DOMAIN), noise_key=key)
        for k in range(len(items[p]) // W):
            ref.update_batch(items[p][k * W : (k + 1) * W])
            release = by_substream[(p, k)]
            if snapshots is not None:  # byte-identical, also after a restore
                assert snapshots[(p, k)]["data"] == ref.to_bytes(), (p, k)
            assert release["position"] == (k + 1) * W
            assert [e["estimate"] for e in release["estimates"]] == ref.estimate_batch(QUERIES).tolist()
            assert [(h["item"], h["estimate"]) for h in release["heavy_hitters"]] == ref.heavy_hitters(GAMMA)
            assert (release["ledger_id"], release["ledger_sequence"]) == (config.ledger_id, 1)
            assert release["ledger_entry_hash"] == settings.charge.entry_hash
            assert "replace one event" in release["neighbour_relation"]


def test_job_releases_every_substream_once_across_a_failure(flink_broker, tmp_path) -> None:
    bootstrap, prefix = flink_broker.bootstrap, fresh_name("window")
    topic = f"{prefix}-events"
    phased = PhasedProducer(bootstrap, topic, partitions=SHARDS, events=EVENTS, batch_size=250)
    first_half_shard0 = int(np.count_nonzero(phased.parts[: phased.half] == 0))
    settings = count_settings()
    config = replace(  # a graph at parallelism 2 (shard 0 in sub-task 0, shard 1 in 1: docs/deploy.md)
        _config(settings, bootstrap, prefix, topic, tmp_path, first_half_shard0 + 500, f"{prefix}-states"),
        parallelism=2,
    )
    phased.first()
    began = time.monotonic()
    job, prepared = start(config)
    try:  # a committed release proves a completed checkpoint holding sketch state before the failure
        assert read_topic(bootstrap, config.releases_topic, expect=1, idle_s=0.1, timeout_s=90)
        stream = phased.rest()
        items = {p: np.concatenate(stream.batches[p]) for p in range(SHARDS)}
        expected = sum(len(v) // W for v in items.values())
        releases = read_topic(bootstrap, config.releases_topic, expect=expected, idle_s=2.0, timeout_s=120)
        states = read_topic(
            bootstrap, config.hooks.expose_states_topic, expect=expected, idle_s=0.5, timeout_s=30
        )
        letters = read_topic(bootstrap, config.dlq_topic, idle_s=0.5, timeout_s=20)
        ledger = read_topic(bootstrap, config.ledger_topic, idle_s=0.5, timeout_s=20)
        seconds = time.monotonic() - began
        # the shard operators' metrics since the restart (a restarted task's counters start at 0)
        port = int(dict(config.flink_conf)["rest.port"])
        wait_for_metrics(
            "the REST API", lambda: privstream_metrics(port),
            {"eventsCounted": lambda v: v > 0, "releases": lambda v: v > 0, "stateBytes": lambda v: v > 0},
        )  # fmt: skip
    finally:
        job.cancel().result()
    assert (tmp_path / "failed").exists()  # the failure did happen, in the second half of shard 0
    by_substream = one_per(
        releases, lambda r: (r["shard"], r["substream"]), fields_but(releases, "release_time")
    )
    snapshots = one_per(states, lambda r: (r["shard"], r["epoch"]), fields_but(states, "created_time"))
    assert (
        sorted(by_substream)
        == sorted(snapshots)
        == [(p, k) for p in range(SHARDS) for k in range(len(items[p]) // W)]
    )
    entries = [r for r in ledger if r.get("ledger_id") == config.ledger_id and "sequence" in r]
    assert [e["sequence"] for e in entries] == [1]  # charged once for the whole run
    _assert_releases_are_the_cores(by_substream, items, prepared, snapshots)
    malformed = {(r["partition"], r["offset"]) for r in letters}
    assert len(malformed) == 1 and next(iter(malformed))[0] == 1  # PhasedProducer's malformed message
    assert {r["run_id"] for r in releases} == {r["run_id"] for r in letters} == {prefix}  # tail --run
    heavy = by_substream[(0, len(items[0]) // W - 1)]["heavy_hitters"]
    print(
        f"\nsliding-window: {len(by_substream)} releases ({len(releases)} records read), "
        f"{len(states)} states, {seconds:.1f} s from submission; shard 0's last heavy hitters {heavy}"
    )


START, STEP_MS, SPAN_MS, TIMED_EVENTS = 1_700_000_000_000, 1000, 20_000, 5000


def _shard_and_t(release: dict) -> tuple[int, int]:
    return release["shard"], release["position"]


def test_event_time_job_releases_on_punctuations_as_the_logic_across_a_failure(
    flink_broker, tmp_path
) -> None:
    from privstream.connectors.consume import read_topic as read_raw
    from privstream.connectors.produce import EventProducer
    from privstream.connectors.punctuation import PunctuationSchedule

    from privstream.datagen import EventColumns, generate_events
    from privstream.partitioning import partition_for

    bootstrap, prefix = flink_broker.bootstrap, fresh_name("window-et")
    topic = create_topic(bootstrap, f"{prefix}-events", SHARDS)
    columns = generate_events(
        "zipf",
        TIMED_EVENTS,
        seed=3,
        universe=DOMAIN - 1,
        rate=TIMED_EVENTS / (SPAN_MS / 1000),
        start_time_ms=START,
    )
    items, times = (
        np.asarray(columns.items, dtype=np.int64),
        np.asarray(columns.event_time_ms, dtype=np.int64),
    )
    half = TIMED_EVENTS // 2
    producer = EventProducer(bootstrap, topic, events_per_message=100, key_by="item")
    schedule = PunctuationSchedule(producer, STEP_MS, START, START + SPAN_MS)  # --punctuate-every 1s
    schedule.send(EventColumns(items[:half], None, times[:half]))
    # one late event (behind the last punctuation) and one beyond the horizon: both dead-lettered
    producer.send(np.array([1, 2]), None, np.array([START + 10, START + 10**6]))
    producer.flush()
    settings = WindowSettings(
        window=4 * STEP_MS, substream=STEP_MS, checkpoints=(STEP_MS, 16, 1), budget_ratio=0.5, depth=3,
        width=128, epsilon=1.0, delta=1e-6, domain_size=DOMAIN, gamma=GAMMA, shards=SHARDS,
        queries=QUERIES, submission_key=KEY, windowing="event-time", origin=START, window_items=400,
    )  # fmt: skip
    first_half_shard0 = int(np.count_nonzero(partition_for(items[:half], SHARDS) == 0))
    config = _config(settings, bootstrap, prefix, topic, tmp_path, first_half_shard0 + 300)
    began = time.monotonic()
    job, prepared = start(config)
    expected = SHARDS * (SPAN_MS // STEP_MS)  # every tick after the first completes one substream
    try:  # a committed release proves a completed checkpoint holding sketch state before the failure
        assert read_topic(bootstrap, config.releases_topic, expect=1, idle_s=0.1, timeout_s=90)
        schedule.send(EventColumns(items[half:], None, times[half:]))
        schedule.end()
        producer.finish()
        producer.close()
        releases = read_distinct(
            bootstrap, config.releases_topic, _shard_and_t, expected, ignore=("release_time",)
        )
        letters = read_distinct(
            bootstrap, config.dlq_topic, lambda r: (r["partition"], r["offset"], r["error"]), 2,
            ignore=("failed_time",),
        )  # fmt: skip
        ledger = read_topic(bootstrap, config.ledger_topic, idle_s=0.5, timeout_s=20)
        seconds = time.monotonic() - began
    finally:
        job.cancel().result()
    assert (tmp_path / "failed").exists()  # the failure did happen, in the second half of shard 0
    reference = replace(settings, charge=prepared.settings.charge)
    want_releases, want_letters = {}, set()
    messages = read_raw(bootstrap, topic, idle_s=1.0, timeout_s=60)
    for p in range(SHARDS):
        logic = WindowShardLogic(reference, p)
        for message in (m for m in messages if m.partition == p):
            for kind, data in logic.process(message.raw, message.offset, topic):
                record = decode(data)[1]
                if kind == "release":
                    want_releases[(p, record["position"])] = {
                        **{k: v for k, v in record.items() if k != "release_time"},
                        "run_id": config.run_id,  # stamped by the job on the way to its sink
                    }
                else:
                    want_letters.add((record["partition"], record["offset"], record["error"]))
    assert releases == want_releases and len(releases) == expected
    assert set(letters) == want_letters and len(want_letters) == 2
    errors = [r for *_, r in want_letters]
    assert any("late" in e for e in errors) and any("beyond the horizon" in e for e in errors)
    for (_, t), release in releases.items():
        assert (release["windowing"], release["window_end"]) == ("event-time", t)
        assert (t - START + 1) % STEP_MS == 0 and release["window_start"] == max(START, t - 4 * STEP_MS + 1)
        assert "add/remove one event" in release["neighbour_relation"]
        assert (release["ledger_id"], release["ledger_sequence"]) == (config.ledger_id, 1)
    entries = [r for r in ledger if r.get("ledger_id") == config.ledger_id and "sequence" in r]
    assert [e["sequence"] for e in entries] == [1]  # charged once for the whole run
    print(f"\nsliding-window event-time: {len(releases)} releases, {seconds:.1f} s from submission")


def cluster_config(
    bootstrap: str, topic: str, prefix: str, parallelism: int, checkpoints: str
) -> SlidingWindowConfig:
    """The count-window job without test faults, for tests/jobs/seeded_sliding_window.py."""
    config = _config(count_settings(), bootstrap, prefix, topic, Path(checkpoints), 0)
    return replace(
        config, hooks=TestHooks(), flink_conf=(), parallelism=parallelism, checkpoint_dir=checkpoints
    )


def test_job_at_parallelism_2_on_two_taskmanagers(flink_broker, two_taskmanager_cluster) -> None:
    """``flink run -py`` on PyFlink's own standalone cluster, two TaskManagers of one slot each, at
    ``--parallelism 2``: one shard sub-task in each TaskManager, both reading events (the routing
    keys put shard 0 in one, shard 1 in the other), and every release equals the core DPSW-Sketch's
    under the same submission key — what the parallelism-1 logic releases (the test above)."""
    cluster = two_taskmanager_cluster
    prefix = fresh_name("window-cluster")
    topic = f"{prefix}-events"
    stream = produce_stream(flink_broker.bootstrap, topic, partitions=SHARDS, events=EVENTS, batch_size=250)
    items = {p: np.concatenate(stream.batches[p]) for p in range(SHARDS)}
    checkpoints = str(cluster.workdir / "checkpoints")
    script = Path(__file__).parent / "jobs" / "seeded_sliding_window.py"
    proc = cluster.submit(script, flink_broker.bootstrap, topic, prefix, "2", checkpoints, detached=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [running] = cluster.rest("/jobs/overview")["jobs"]
    try:
        expected = sum(len(v) // W for v in items.values())
        releases = read_topic(
            flink_broker.bootstrap, f"{prefix}-releases", expect=expected, idle_s=2.0, timeout_s=180
        )
        # one shard sub-task in each TaskManager, both reading events
        assert_subtasks_read(cluster.rest, running["jid"], lambda name: "DPSW" in name, 2, taskmanagers=2)
    finally:
        cluster.cancel(running["jid"])
    by_substream = one_per(
        releases, lambda r: (r["shard"], r["substream"]), fields_but(releases, "release_time")
    )
    assert sorted(by_substream) == [(p, k) for p in range(SHARDS) for k in range(len(items[p]) // W)]
    ledger = read_topic(flink_broker.bootstrap, f"{prefix}-ledger", idle_s=0.5, timeout_s=20)
    [entry] = [record_state(r) for r in ledger if "sequence" in r]  # the one charge of the run
    config = cluster_config(flink_broker.bootstrap, topic, prefix, 2, checkpoints)
    charged = replace(config.settings, charge=replace(config.settings.charge, entry_hash=entry.entry_hash))
    _assert_releases_are_the_cores(by_substream, items, replace(config, settings=charged))
