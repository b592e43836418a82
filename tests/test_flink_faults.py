"""The heavy-hitters job under real faults: the durable embedded broker restarted while the job runs
(between its bursts: tansu hangs when restarted under a busy job, see the test), and a TaskManager
process of a standalone cluster killed while it processes. Both runs use the
data of ``hh_stream`` (:class:`PhasedProducer`'s defaults) and seeded noise, so their committed
outputs must equal the failure-free reference run's: every event counted exactly once (the
pre-noise sketches, compared byte for byte, and their event counts), every epoch released once, one
ledger entry per epoch. The figures of each run are printed (``-s`` shows them)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.clients import free_port

from tests.flink_fixtures import (
    NOISE_SEED,
    JobOutputs,
    PhasedProducer,
    fresh_name,
    job_config,
    read_outputs,
    read_topic,
    seeded,
    start_job,
    trigger_checkpoint,
)
from tests.test_flink_heavy_hitters import EPOCH_EVENTS, K, assert_same_releases

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]


def descendants(pid: int) -> list[int]:
    """The process ids below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def assert_counted_once(out: JobOutputs, reference: JobOutputs, produced: int) -> dict[str, Any]:
    """The committed outputs equal the reference run's; returns the run's figures."""
    assert_same_releases(out, reference)
    assert [s["data"] for s in out.sketches] == [s["data"] for s in reference.sketches]
    counted = sum(s["n"] for s in out.sketches)
    assert counted == produced
    assert sorted(e["sequence"] for e in out.ledger) == [1, 2, 3]  # one charge per epoch
    return {
        "events produced": produced,
        "events counted": counted,
        "releases": len(out.releases),
        "ledger entries": len(out.ledger),
        "dead letters": len(out.dead_letters),
    }


@pytest.fixture
def moto_s3() -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback with bucket ``tansu``: the durable store a restarted broker finds
    again (``s3rver``, the store of ``--data``, ignores the conditional writes tansu relies on:
    under a Flink job's transactional load it loses producer registrations; docs/stack-facts.md)."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_ENDPOINT": f"http://127.0.0.1:{port}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT"],
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket="tansu")
    try:
        yield env
    finally:
        server.stop()


def test_durable_broker_restarted_while_the_job_runs(
    flink_connector_jars, hh_reference_run: JobOutputs, moto_s3: dict[str, str]
) -> None:
    """The durable broker (tansu's ``s3://`` engine on a moto S3 that outlives it) is stopped and
    started again on the same port and data while the job runs (after epoch 0's release, 2000 events of epoch 1 in its state) and
    the producer stays connected; then the producer sends the second half in slices. The job's
    source and sinks reconnect (a failed transaction restores the last checkpoint) and, read with
    ``read_committed``, the outputs equal the failure-free run's.

    Restarted while the job is busy, tansu 0.6.0 stops answering (no Metadata response, no further
    storage requests), with s3rver and with a moto S3 alike, so the restart falls where the job has
    caught up (docs/stack-facts.md)."""
    broker = EmbeddedBroker(port=free_port(), s3_env=moto_s3).start()
    try:
        bootstrap = broker.bootstrap
        phased = PhasedProducer(bootstrap, fresh_name("restart-events"), reconnect_backoff_max_ms=1000)
        phased.first()
        prefix = fresh_name("restart")
        rest_port = free_port()
        config = replace(
            job_config(
                phased.stream, prefix, restart_attempts=50, flink_conf=(("rest.port", str(rest_port)),)
            ),
            stop_at_end_markers=False,
        )
        client = start_job(config, seeded(prefix))  # unbounded
        assert len(read_topic(bootstrap, config.releases_topic, expect=1, idle_s=0.0)) == 1
        job_id = str(client.get_job_id())
        # Caught up: epoch 0's release is committed, so the source has read phase 1; the second
        # triggered checkpoint's barrier follows every phase-1 record through the job.
        trigger_checkpoint(rest_port, job_id)
        trigger_checkpoint(rest_port, job_id)
        stopped, old_pid = time.monotonic(), broker.pid
        broker.stop()
        broker.start()
        downtime = time.monotonic() - stopped
        assert broker.pid != old_pid  # a new broker process, on the same port and data
        items = phased.columns.items[phased.half :]
        times = phased.columns.event_time_ms[phased.half :]
        slices = 0
        for lo in range(0, len(items), 1500):
            phased.producer.send(items[lo : lo + 1500], None, times[lo : lo + 1500])
            slices += 1
            time.sleep(0.1)
        phased.producer.finish()
        phased.producer.close()
        try:
            out = read_outputs(bootstrap, prefix, expect_releases=3, sketches_per_release=3)
        finally:
            client.cancel().result()  # unbounded: everything is published once EndMarkers closed epoch 2
        figures = assert_counted_once(out, hh_reference_run, len(phased.columns.items))
        figures.update(slices=slices, broker_downtime_s=round(downtime, 2))
        print(f"\nbroker-restart run figures: {figures}")
    finally:
        broker.stop()


def test_taskmanager_killed_mid_epoch(
    flink_broker, hh_reference_run: JobOutputs, standalone_cluster, tmp_path
) -> None:
    """``flink run -d`` on a standalone cluster; after epoch 0 was released, most of the second half
    of the stream is produced, a checkpoint is triggered and, once it completed, the TaskManager
    process and its Python workers are killed (SIGKILL); a new TaskManager is started, the rest of
    the stream is produced, and the job restores its last checkpoint on it and runs to the end,
    replaying what was in flight. No step waits a fixed time. The outputs equal the
    failure-free run's, and Flink's exception history shows the lost TaskManager."""
    phased = PhasedProducer(flink_broker.bootstrap, fresh_name("tm-events"))
    phased.first()  # 10000 events per shard: epoch 0 closes, 2000 events of epoch 1 stay in state
    prefix = fresh_name("tm")
    stop = ",".join(f"{p}:{o}" for p, o in phased.stop_offsets().items())
    script = Path(__file__).parent / "jobs" / "seeded_heavy_hitters.py"
    args = [
        str(NOISE_SEED), f"{prefix}-sketches",
        "--bootstrap", flink_broker.bootstrap, "--topic", phased.stream.topic,
        "--epsilon", "1.0", "--delta", "1e-6", "--k", str(K), "--epoch", str(EPOCH_EVENTS),
        "--releases-topic", f"{prefix}-releases", "--ledger-topic", f"{prefix}-ledger",
        "--dlq-topic", f"{prefix}-dlq", "--ledger-id", f"test/{prefix}", "--ledger-lease", "3s",
        "--stop-offsets", stop, "--restart-attempts", "10", "--checkpoint-interval", "500ms",
        "--checkpoint-dir", str(standalone_cluster.workdir / "checkpoints"),
    ]  # fmt: skip
    proc = standalone_cluster.submit(script, *args, detached=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(read_topic(flink_broker.bootstrap, f"{prefix}-releases", expect=1, idle_s=0.0)) == 1
    [old] = standalone_cluster.taskmanager_pids()
    [job] = standalone_cluster.rest("/jobs/overview")["jobs"]
    # All of the second half but shard 0's last 6 batches: shard 0 stays below 16000 events (15436),
    # so epoch 1 cannot close and the job cannot finish, whatever the machine's speed; nothing is
    # released in a transaction the kill aborts (this broker would show it: docs/stack-facts.md).
    assert phased.second(held_batches=6) < 2 * EPOCH_EVENTS
    checkpoint = trigger_checkpoint(standalone_cluster.rest_port, job["jid"], timeout_s=120)
    in_flight = len(read_topic(flink_broker.bootstrap, f"{prefix}-releases", idle_s=0.0, timeout_s=5))
    for pid in [old, *descendants(old)]:  # the TaskManager and its Python workers: a machine loss
        os.kill(pid, signal.SIGKILL)
    standalone_cluster.start_taskmanager()
    phased.rest()  # the held batches and the EndMarkers, while the job restores on the new TaskManager
    out = read_outputs(flink_broker.bootstrap, prefix, expect_releases=3, sketches_per_release=3)
    deadline = time.monotonic() + 120
    while job["state"] != "FINISHED" and time.monotonic() < deadline:
        time.sleep(1.0)
        [job] = standalone_cluster.rest("/jobs/overview")["jobs"]
    assert job["state"] == "FINISHED"
    history = standalone_cluster.rest(f"/jobs/{job['jid']}/exceptions")["exceptionHistory"]["entries"]
    assert history, "the job must have failed over"
    produced = len(phased.columns.items)
    figures = assert_counted_once(out, hh_reference_run, produced)
    assert in_flight == 1  # killed while epoch 1 was open
    figures.update(
        killed_pid=old,
        killed_after_checkpoint=checkpoint,
        releases_before_kill=in_flight,
        failovers=len(history),
        first_failure=history[0]["exceptionName"],
    )
    print(f"\ntaskmanager-kill run figures: {figures}")
