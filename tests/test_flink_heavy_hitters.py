"""The heavy-hitters job on a real Flink MiniCluster against the real embedded Kafka-protocol broker.

All tests share one produced stream (3 partitions × 40 EventBatch messages of 500 Zipf events, one
EpochWatermark punctuation after the first 20, one malformed message, EndMarkers) and one
failure-free reference run (``hh_reference_run``). Noise is seeded (a test hook, ``TestHooks``, passed
through the programmatic API: the command line has no such option) so releases are reproducible and
can be recomputed from core; outputs are read with ``read_committed``. One test runs with the
production noise (no seed) to check that a replay after a restore redraws the same noise.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

import numpy as np
import pytest
from privstream.connectors.consume import DecodedRecord
from privstream.connectors.ledger_topic import LedgerUnavailable, read_ledger
from privstream.operators.release_logic import new_ledger

from privstream.accounting import Budget, PrivacyLedger
from privstream.mechanisms import release_disjoint
from privstream.noise.rng import SeededRandomSource
from privstream.sketches import Build, MisraGries, load_sketch, merge_in_order
from tests.flink_fixtures import (
    NOISE_SEED,
    JobOutputs,
    PhasedProducer,
    ProducedStream,
    assert_subtasks_read,
    create_topic,
    fresh_name,
    job_config,
    one_per,
    read_outputs,
    read_topic,
    rest_get,
    run_job_to_end,
    seeded,
    start_job,
    trigger_checkpoint,
)

if TYPE_CHECKING:
    from privstream.jobs.config import HeavyHittersConfig, TestHooks

pytestmark = [pytest.mark.flink, pytest.mark.kafka]

EPOCH_EVENTS, K = 8000, 32


def core_epoch_sketches(batches: list[np.ndarray]) -> list[MisraGries]:
    """Core's per-shard sketches: count epochs of EPOCH_EVENTS, fed message by message."""
    sketches: list[MisraGries] = []
    seen = 0
    for batch in batches:
        start = 0
        while start < len(batch):
            epoch = (seen + start) // EPOCH_EVENTS
            stop = min(len(batch), (epoch + 1) * EPOCH_EVENTS - seen)
            while len(sketches) <= epoch:
                sketches.append(MisraGries(K))
            sketches[epoch].update_batch(batch[start:stop])
            start = stop
        seen += len(batch)
    return sketches


def core_per_shard(stream: ProducedStream) -> dict[int, list[MisraGries]]:
    """Core's sketches per partition and count epoch (every partition has the same epochs here)."""
    return {p: core_epoch_sketches(b) for p, b in stream.batches.items()}


def released_items(record: dict) -> list[tuple[object, int]]:
    return [(i["item"], i["count"]) for i in record["items"]]


#: the fields of a Release that a replay must reproduce (all but its release time)
RELEASE_FIELDS = (
    "epoch",
    "items",
    "epsilon",
    "delta",
    "mechanism",
    "neighbour_relation",
    "privacy_unit",
    "error_bound",
)


def assert_same_releases(a: JobOutputs, b: JobOutputs) -> None:
    fields = RELEASE_FIELDS
    assert [{k: r[k] for k in fields} for r in a.releases] == [{k: r[k] for k in fields} for r in b.releases]


def test_releases_equal_core_per_shard_pmg_of_partition_sketches(
    hh_stream: ProducedStream, hh_reference_run: JobOutputs
) -> None:
    """The default per-shard release: every partition's sequential Alg. 1 sketch of each count epoch
    is released with PMG and the releases are summed, charged once per epoch (parallel composition
    over the item-hash partition, ``release_disjoint``)."""
    out = hh_reference_run
    per_shard = core_per_shard(hh_stream)
    assert {len(v) for v in per_shard.values()} == {3}
    # the pre-noise sketches (test-only side topic): one per (epoch, shard), equal to core's bytes
    got = {(s["epoch"], s["shard"]): s for s in out.sketches}
    assert sorted(got) == [(e, p) for e in range(3) for p in range(hh_stream.partitions)]
    for (epoch, shard), snap in got.items():
        want = per_shard[shard][epoch]
        assert snap["build"] == "ALG1_SEQUENTIAL" and snap["data"] == want.to_bytes()
    # the releases equal core's per-shard release with the same (test-only) seeded noise
    assert [r["epoch"] for r in out.releases] == [0, 1, 2]
    for rec in out.releases:
        e = rec["epoch"]
        ledger = PrivacyLedger(Budget(1.0, 1e-6), composition="parallel_epochs")
        ref = release_disjoint(
            [per_shard[p][e] for p in range(hh_stream.partitions)],
            Budget(1.0, 1e-6),
            rng=SeededRandomSource(f"privstream-test-noise:{NOISE_SEED}:{e}"),
            epoch=e,
            ledger=ledger,
            group_size=2,  # count epochs: "replace one event" = remove + add (release_logic.py)
            n_bound=EPOCH_EVENTS,  # count epochs: the epoch size bounds each shard's events (public)
        )
        assert rec["mechanism"] == ref.mechanism == "pmg"
        assert released_items(rec) == [(x, c) for x, c in ref.items]
        assert rec["epsilon"] == 1.0 and rec["delta"] == 1e-6 and rec["privacy_unit"]
        relation = rec["neighbour_relation"]  # count epochs: a replacement in one shard's stream
        assert "one shard's stream" in relation and "parallel composition" in relation
    assert any(released_items(r) for r in out.releases)  # Zipf heavy hitters survive the noise
    # the malformed message went to the dead-letter topic with its reason and position
    assert len(out.dead_letters) == 1
    dead = out.dead_letters[0]
    assert (
        dead["partition"] == 1
        and dead["original_value"] == b"\x00not avro"
        and "undecodable" in dead["error"]
    )
    # ledger: one charge per epoch, disjoint epochs compose in parallel
    last = max(out.ledger, key=lambda e: e["sequence"])
    assert last["sequence"] == 3 and last["epsilon_spent"] == pytest.approx(1.0)


def test_injected_failure_restores_exactly_once(flink_broker, hh_reference_run: JobOutputs, tmp_path) -> None:
    """The sketch operator throws once mid-stream, after epoch 0's release was committed (restart
    strategy on): the restored job's committed outputs equal the failure-free run's — same merged
    sketches, each epoch released exactly once, the ledger charged once per epoch."""
    phased = PhasedProducer(flink_broker.bootstrap, fresh_name("fail-events"))  # same data as hh_stream
    phased.first()  # 10000 events per shard: epoch 0 closes
    marker, prefix = tmp_path / "failed-once", fresh_name("fail")
    client = start_job(
        job_config(phased.stream, prefix, stop_offsets=phased.stop_offsets()),
        seeded(prefix, fail_marker=str(marker), fail_after=14000),
    )
    assert len(read_topic(flink_broker.bootstrap, f"{prefix}-releases", expect=1, idle_s=0.0)) == 1
    assert not marker.exists()
    # while it runs, its release operator heartbeats: a second start-up with its ledger id is refused
    config = job_config(phased.stream, prefix)
    with pytest.raises(LedgerUnavailable, match=f"another job with ledger id '{config.release.ledger_id}'"):
        read_ledger(
            flink_broker.bootstrap,
            config.ledger_topic,
            new_ledger(config.release, config.spec, config.policy),
            lease_s=3.0,
        )
    phased.rest()  # shard 0 passes 14000 events: the operator throws once, Flink restores a checkpoint
    client.get_job_execution_result().result()
    assert marker.exists()  # the failure did happen
    out = read_outputs(flink_broker.bootstrap, prefix, expect_releases=3, sketches_per_release=3)
    assert_same_releases(out, hh_reference_run)
    assert [s["data"] for s in out.sketches] == [s["data"] for s in hh_reference_run.sketches]
    assert sorted(e["sequence"] for e in out.ledger) == [1, 2, 3]  # no charge published twice
    assert max(out.ledger, key=lambda e: e["sequence"])["epsilon_spent"] == pytest.approx(1.0)
    assert len(out.dead_letters) == 1


def read_all_records(
    bootstrap: str, topic: str, done: Callable[[list[DecodedRecord]], bool], idle_s: float = 0.0
) -> list[DecodedRecord]:
    """Every record of ``topic`` in offset order, uncommitted and aborted ones included
    (``read_uncommitted``: what a reader outside the exactly-once contract sees), until ``done``
    holds and then nothing more arrived for ``idle_s``."""
    from privstream.connectors.consume import RecordConsumer

    out: list[DecodedRecord] = []
    with RecordConsumer(
        bootstrap, topic, start="earliest", dead_letters=False, isolation_level="read_uncommitted"
    ) as reader:
        try:
            for record in reader.records(until=lambda: done(out), idle_s=idle_s, timeout_s=120.0):
                out.append(record)
        except TimeoutError as e:
            seen = [(r.offset, r.value.get("epoch")) for r in out]
            raise TimeoutError(f"{e}; (offset, epoch) seen: {seen}") from e
    return out


def test_unseeded_restore_replays_an_aborted_release_with_the_same_noise(
    flink_broker, hh_reference_run: JobOutputs, tmp_path
) -> None:
    """Production noise (no seed: the launcher's per-submission CSPRNG key, kept in the release
    operator's state from the first release on). The job starts on an empty topic, and Flink takes
    its first checkpoint at once (measured: the scheduler triggers it when the tasks run), before
    any release; the next is a day away. Epochs 0 and 1 are then released in an open transaction,
    shard 0 fails, and the job restores that first checkpoint, which holds no key. The replays must
    equal the aborted releases a ``read_uncommitted`` reader already saw: only the submission's key
    can give the same noise (a key drawn afresh would give new noise: two releases of one epoch for
    one charge). The checkpointed key is the other source, tested across submissions by
    :func:`test_stop_with_savepoint_and_resume`. Every copy of an output is identical to the
    failure-free run's, and an event message after partition 2's EndMarker is dead-lettered."""
    from privstream.connectors.clients import free_port

    bootstrap = flink_broker.bootstrap
    phased = PhasedProducer(bootstrap, fresh_name("replay-events"), after_end_partition=2)
    shard0 = phased.stream.batches[0]
    fail_after = sum(map(len, shard0)) - len(shard0[-1]) + 1  # shard 0's last message fails
    marker, prefix, port = tmp_path / "failed-once", fresh_name("replay"), free_port()
    config = replace(
        job_config(
            phased.stream, prefix, stop_offsets=phased.stop_offsets(), flink_conf=(("rest.port", str(port)),)
        ),
        checkpoint_interval=timedelta(days=1),  # only the first one, at the start, during the test
        ledger_lease=timedelta(days=3),
    )
    client = start_job(
        config, replace(seeded(prefix, fail_marker=str(marker), fail_after=fail_after), noise_seed=None)
    )
    job_id, releases = str(client.get_job_id()), f"{prefix}-releases"
    deadline = time.monotonic() + 120
    while rest_get(port, f"/jobs/{job_id}/checkpoints")["counts"]["completed"] < 1:
        assert time.monotonic() < deadline, "no first checkpoint"
        time.sleep(0.2)
    phased.first()  # epoch 0 closes on every shard
    assert phased.second(held_batches=1) == fail_after - 1  # all of it but shard 0's last message
    aborted = read_all_records(bootstrap, releases, lambda out: len(out) >= 2)  # in an open transaction
    assert [r.value["epoch"] for r in aborted] == [0, 1] and all(released_items(r.value) for r in aborted)
    assert rest_get(port, f"/jobs/{job_id}/checkpoints")["counts"]["completed"] == 1  # none since
    phased.rest()  # shard 0's last message: the job fails, both releases are aborted
    while not marker.exists():  # no checkpoint may commit a release before the failure
        assert time.monotonic() < deadline, "the injected failure did not happen"
        time.sleep(0.2)
    # The marker is written just before the operator raises: a checkpoint triggered before Flink
    # registered the failure can still complete (and commit epochs 0 and 1), so wait for it.
    while not rest_get(port, f"/jobs/{job_id}/exceptions")["exceptionHistory"]["entries"]:
        assert time.monotonic() < deadline, "Flink did not register the injected failure"
        time.sleep(0.2)
    finished = client.get_job_execution_result()
    while not finished.done():  # the restored job replays epochs 1 and 2; its final commit needs a checkpoint
        assert time.monotonic() < deadline + 180, "the restored job did not finish"
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):  # restarting, or finished meanwhile
            trigger_checkpoint(port, job_id, timeout_s=30)
        time.sleep(0.5)
    finished.result()
    # everything a read_uncommitted reader sees: the aborted releases and their replays (this
    # broker even shows aborted records to read_committed readers: docs/stack-facts.md)
    last_aborted = max(r.offset for r in aborted)

    def replayed(out: list[DecodedRecord]) -> bool:
        return {r.value["epoch"] for r in out if r.offset > last_aborted} >= {0, 1, 2}

    seen = read_all_records(bootstrap, releases, replayed, idle_s=1.0)
    by_epoch = one_per([r.value for r in seen], lambda r: r["epoch"], RELEASE_FIELDS)
    assert sorted(by_epoch) == [0, 1, 2]  # one release per epoch: all copies identical
    for record in aborted:  # the aborted release's noise again, in a replay after it
        assert by_epoch[record.value["epoch"]] == {k: record.value[k] for k in RELEASE_FIELDS}
        assert max(r.offset for r in seen if r.value["epoch"] == record.value["epoch"]) > record.offset
    out = read_outputs(bootstrap, prefix, expect_releases=3, sketches_per_release=3, dead_letters=2)
    sketches = one_per(out.sketches, lambda s: (s["epoch"], s["shard"]), ("data",))
    assert sketches == one_per(hh_reference_run.sketches, lambda s: (s["epoch"], s["shard"]), ("data",))
    assert sorted(one_per(out.ledger, lambda e: e["sequence"], ("entry",))) == [1, 2, 3]
    dead = one_per(out.dead_letters, lambda d: (d["partition"], d["offset"]), ("error", "original_value"))
    assert [p for p, _ in sorted(dead)] == [1, 2]  # the malformed message, and after partition 2's end
    assert "after this partition's end of stream" in dead[max(dead)]["error"]


def test_stop_with_savepoint_and_resume(flink_broker, hh_reference_run: JobOutputs, tmp_path) -> None:
    """Production noise (no seed), with the per-submission keys made known to the test: the first
    submission (key A) stops with a savepoint after epoch 0 was released; the rest is produced; a
    new submission (key B) resumes from the savepoint. Its releases must carry key A's noise, the
    key in the savepoint's state: they equal those of a failure-free run submitted with key A (and
    the same ledger id, which the noise context binds), not key B's. Together the two runs publish
    each epoch once, with the failure-free run's sketches."""
    from privstream.jobs.savepoints import stop_with_savepoint

    key_a, key_b = bytes(range(32)), bytes(range(32, 64))
    phased = PhasedProducer(flink_broker.bootstrap, fresh_name("sp-events"))
    phased.first()
    prefix, ledger_id = fresh_name("sp"), f"test/{fresh_name('sp-ledger')}"

    def config(out_prefix: str, restore_from: str | None = None) -> HeavyHittersConfig:
        base = job_config(
            phased.stream, out_prefix, stop_offsets=phased.stop_offsets(), restore_from=restore_from
        )
        return replace(base, ledger_id=ledger_id)

    def hooks(out_prefix: str, key: bytes) -> TestHooks:
        return replace(seeded(out_prefix), noise_seed=None, submission_key=key)

    client = start_job(config(prefix), hooks(prefix, key_a))
    assert len(read_topic(flink_broker.bootstrap, f"{prefix}-releases", expect=1, idle_s=0.0)) == 1
    savepoint = stop_with_savepoint(client, str(tmp_path / "savepoints"))
    stopped = read_topic(flink_broker.bootstrap, f"{prefix}-releases", expect=1, idle_s=1.0)
    assert len(stopped) == 1  # stopped mid-stream: nothing more within 1 s
    phased.rest()
    resumed = start_job(config(prefix, restore_from=savepoint), hooks(prefix, key_b))
    try:
        out = read_outputs(flink_broker.bootstrap, prefix, expect_releases=3, sketches_per_release=3)
    finally:
        # FLINK-33466 / FLINK-31006 (flink-connector-kafka 4.0.1): a bounded KafkaSource restored from
        # a savepoint reads to its stopping offsets but is never sent NoMoreSplits, so the resumed job
        # does not finish by itself; everything is published (EndMarkers closed every epoch): cancel.
        resumed.cancel().result()
    reference_prefix = fresh_name("sp-key-a")
    start_job(config(reference_prefix), hooks(reference_prefix, key_a)).get_job_execution_result().result()
    reference = read_outputs(
        flink_broker.bootstrap, reference_prefix, expect_releases=3, sketches_per_release=3
    )
    assert_same_releases(out, reference)
    assert [s["data"] for s in out.sketches] == [s["data"] for s in hh_reference_run.sketches]
    assert sorted(e["sequence"] for e in out.ledger) == [1, 2, 3]
    assert len(out.dead_letters) == 1


@pytest.mark.slow
def test_flink_run_at_parallelism_2_on_two_taskmanagers(
    hh_stream: ProducedStream, hh_reference_run: JobOutputs, two_taskmanager_cluster
) -> None:
    """Scale-out: ``bin/flink run -py`` of the heavy-hitters command line with ``--parallelism 2``
    against PyFlink's own start-cluster.sh on loopback with two TaskManagers of one slot each:
    ``tests/jobs/seeded_heavy_hitters.py`` runs ``privstream.jobs.heavy_hitters.main`` with the test
    noise seed injected through the API. The shard operator runs as two sub-tasks, one in each
    TaskManager, and the releases equal the parallelism-1 MiniCluster reference run's (a shard's
    state, noise and place in the fixed merge order do not depend on the slot that holds it)."""
    from pathlib import Path

    standalone_cluster = two_taskmanager_cluster
    script = Path(__file__).parent / "jobs" / "seeded_heavy_hitters.py"
    prefix = fresh_name("cluster")
    args = [
        str(NOISE_SEED),
        f"{prefix}-sketches",
        "--bootstrap",
        hh_stream.bootstrap,
        "--topic",
        hh_stream.topic,
        "--epsilon",
        "1.0",
        "--delta",
        "1e-6",
        "--k",
        str(K),
        "--epoch",
        str(EPOCH_EVENTS),
        "--releases-topic",
        f"{prefix}-releases",
        "--ledger-topic",
        f"{prefix}-ledger",
        "--dlq-topic",
        f"{prefix}-dlq",
        "--ledger-id",
        f"test/{prefix}",
        "--stop-at-end-markers",
        "--checkpoint-dir",
        str(standalone_cluster.workdir / "checkpoints"),
        "--parallelism",
        "2",
    ]
    proc = standalone_cluster.submit(script, *args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = read_outputs(hh_stream.bootstrap, prefix, expect_releases=3, sketches_per_release=3)
    assert_same_releases(out, hh_reference_run)
    [job] = standalone_cluster.rest("/jobs/overview")["jobs"]
    assert job["state"] == "FINISHED"
    # one shard sub-task in each TaskManager, and both hold shards: the routing keys put partition 0
    # on sub-task 0, 1 and 2 on sub-task 1 (docs/deploy.md, "Which sub-task holds a shard")
    assert hh_stream.partitions == 3
    assert_subtasks_read(
        standalone_cluster.rest, job["jid"], lambda name: "shard sketch" in name, 2, taskmanagers=2
    )


def test_user_level_pamg_with_event_time_epochs(flink_broker) -> None:
    """``--m``: UserSetEvent stream, PAMG per partition, tumbling event-time epochs closed by
    ``EpochWatermark`` punctuation; the merged sketches equal core's fixed-order ``merge_in_order``, a user
    set of an already punctuated epoch is dead-lettered, and the user-level ledger composes sequentially."""
    from privstream.connectors.avro_codec import encode
    from privstream.connectors.clients import kafka_producer

    from privstream.partitioning import partition_for
    from privstream.sketches import PrivacyAwareMisraGries

    k, m, epoch_ms, partitions = 16, 3, 10_000, 2
    topic = create_topic(flink_broker.bootstrap, fresh_name("pamg-events"), partitions)
    rng = np.random.default_rng(5)
    per_partition: dict[int, list[tuple[int, tuple[int, ...]]]] = {0: [], 1: []}
    producer = kafka_producer(flink_broker.bootstrap)

    def punctuate(watermark_ms: int) -> None:  # EventProducer.punctuate, for a raw producer
        producer.flush()
        value = encode("EpochWatermark", {"producer_id": "t", "watermark_ms": watermark_ms})
        for p in range(partitions):
            producer.send(topic, partition=p, value=value)

    punctuate(0)  # the clock starts: epochs start at 0 (events before a first punctuation are refused)
    for user in range(1200):  # user u at time 25 ms * u: epochs 0, 1, 2 (30 s of event time)
        items = tuple(sorted({int(x) % 60 for x in rng.zipf(1.5, m)}))  # <= m distinct items
        t = 25 * user
        if user and t % epoch_ms == 0:
            punctuate(t)  # every earlier user has been sent: epoch t // epoch_ms - 1 closes
        p = int(partition_for(np.array([user]), partitions)[0])  # by a hash of the user (verified by the job)
        per_partition[p].append((t, items))
        producer.send(
            topic,
            partition=p,
            value=encode("UserSetEvent", {"user_id": user, "items": list(items), "event_time": t}),
        )
    punctuate(3 * epoch_ms)  # closes epoch 2
    late = encode("UserSetEvent", {"user_id": 5000, "items": [1], "event_time": 5})  # epoch 0: closed
    producer.send(topic, partition=int(partition_for(np.array([5000]), partitions)[0]), value=late)
    for p in range(partitions):
        producer.send(topic, partition=p, value=encode("EndMarker", {"producer_id": "t", "events_sent": 600}))
    producer.flush()
    producer.close()
    stream = ProducedStream(flink_broker.bootstrap, topic, partitions, 1)
    prefix = fresh_name("pamg")
    run_job_to_end(
        job_config(
            stream, prefix, m=m, total_epsilon=3.0, total_delta=3e-6, k=k, epoch=timedelta(seconds=10)
        ),
        seeded(prefix),
    )
    out = read_outputs(flink_broker.bootstrap, prefix, expect_releases=3)
    core = []
    for e in range(3):
        shards = []
        for p in range(partitions):
            sk = PrivacyAwareMisraGries(k, m)
            for t, items in per_partition[p]:
                if t // epoch_ms == e:
                    sk.update(items)
            shards.append(sk)
        core.append(merge_in_order(shards))
    assert [s["epoch"] for s in out.sketches] == [0, 1, 2]
    for snap, want in zip(out.sketches, core, strict=True):
        got = load_sketch(snap["data"])
        assert got.build is Build.PAMG_MERGED and got.counters() == want.counters()
    assert [r["epoch"] for r in out.releases] == [0, 1, 2]
    assert all(r["window_end"] - r["window_start"] == epoch_ms for r in out.releases)
    assert all(r["mechanism"] != "pmg" and "user" in r["privacy_unit"] for r in out.releases)
    last = max(out.ledger, key=lambda e: e["sequence"])
    assert last["sequence"] == 3 and last["epsilon_spent"] == pytest.approx(3.0)  # sequential composition
    assert len(out.dead_letters) == 1 and "late" in out.dead_letters[0]["error"]
    assert out.dead_letters[0]["original_value"] == late
