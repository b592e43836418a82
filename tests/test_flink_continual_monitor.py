"""The continual-monitor job (Chan et al.'s PDCH-LU and PDCH-BF) on a real Flink MiniCluster against
the embedded broker: its releases equal the core protocols fed the same time steps (seeded noise, a
``TestHooks``, a programmatic setting), node → aggregator updates travel on their own topic (one
record per node and step, with word counts), and an injected failure mid-stream restores to the
same releases (exactly once)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from privstream.connectors.clients import free_port
from privstream.connectors.produce import EventProducer
from privstream.jobs.continual_monitor import ContinualConfig, start
from privstream.operators.continual_logic import ContinualSettings, write_keys
from privstream.operators.test_hooks import TestHooks

from privstream.partitioning import partition_for
from tests.flink_fixtures import (
    assert_subtasks_read,
    create_topic,
    fresh_name,
    privstream_metrics,
    read_distinct,
    rest_get,
    wait_for_metrics,
)
from tests.test_continual_logic import core_releases

pytestmark = [pytest.mark.flink, pytest.mark.kafka]

NODES, STEPS, STEP_MS, SITES = 3, 20, 1000, 12


def produce(bootstrap: str) -> tuple[str, list[list[np.ndarray]]]:
    """Sites 0..11 (hashed to 3 partitions = nodes) emit skewed items 0..29 each step; a punctuation
    closes every step. Returns the topic and, per node and step, its items in arrival order."""
    topic = create_topic(bootstrap, fresh_name("continual-events"), NODES)
    rng = np.random.default_rng(9)
    producer = EventProducer(bootstrap, topic, events_per_message=50, key_by="user")
    per_node: list[list[np.ndarray]] = [[] for _ in range(NODES)]
    producer.punctuate(0)  # the clock starts: step 1 is epoch 0
    for t in range(STEPS):
        n = int(rng.integers(20, 60))
        items = np.minimum(rng.zipf(1.5, n), 30) - 1
        sites = rng.integers(0, SITES, n)
        producer.send(items, sites, t * STEP_MS + np.arange(n))
        parts = partition_for(sites, NODES)
        for node in range(NODES):
            per_node[node].append(items[parts == node].astype(np.int64))
        producer.punctuate((t + 1) * STEP_MS)
    producer.finish()
    producer.close()
    return topic, per_node


def job(bootstrap: str, topic: str, prefix: str, **settings: object) -> ContinualConfig:
    base = dict(
        mode="lu", epsilon=2.0, lam=0.25, window=8, universe=30, nodes=NODES, theta=0.2,
        step_ms=STEP_MS, window_items=120,
    )  # fmt: skip
    base.update(settings)
    return ContinualConfig(
        settings=ContinualSettings(**base),  # type: ignore[arg-type]
        bootstrap=bootstrap,
        topic=topic,
        releases_topic=f"{prefix}-releases",
        updates_topic=f"{prefix}-updates",
        dlq_topic=f"{prefix}-dlq",
        checkpoint_interval=timedelta(milliseconds=500),
        run_id=prefix,  # stamped into every release and dead letter (privstream tail --run)
        hooks=TestHooks(noise_seed=5),  # TESTS ONLY: the nodes' noise keys from a public seed
    )


def released(bootstrap: str, config: ContinualConfig) -> list[list[tuple[int, int]]]:
    """The committed releases, step by step (every copy of a step identical)."""
    by_epoch = read_distinct(
        bootstrap, config.releases_topic, lambda r: r["epoch"], STEPS, ignore=("release_time",)
    )
    assert sorted(by_epoch) == list(range(1, STEPS + 1))
    assert {r["run_id"] for r in by_epoch.values()} == {config.run_id}
    return [[(i["item"], i["count"]) for i in by_epoch[e]["items"]] for e in sorted(by_epoch)]


def run(
    config: ContinualConfig, metrics: dict[str, float] | None = None
) -> tuple[list[list[tuple[int, int]]], list[dict]]:
    """Start the job, read its releases and updates (and, with ``metrics``, wait until the operators'
    metrics show them through the REST API of ``config``'s ``rest.port``), cancel it (it is
    unbounded). A replay after the injected failure may show an aborted copy (this broker shows
    aborted records, docs/stack-facts.md): each (node, step) must then be identical in every copy."""
    client = start(config)
    try:
        got = released(config.bootstrap, config)
        updates = read_distinct(
            config.bootstrap,
            config.updates_topic,
            lambda u: (u["node"], u["step"]),
            NODES * STEPS,
            ignore=("update_time",),
        )
        if metrics is not None:
            port = int(dict(config.flink_conf)["rest.port"])
            shown = wait_for_metrics("the REST API", lambda: privstream_metrics(port), metrics)
            assert shown["stateBytes"] > 0
            if config.parallelism > 1:  # every node sub-task holds nodes and read their events
                (jid,) = [
                    j["jid"] for j in rest_get(port, "/jobs/overview")["jobs"] if j["state"] == "RUNNING"
                ]
                assert_subtasks_read(
                    lambda path: rest_get(port, path),
                    jid,
                    lambda name: name.startswith("node"),
                    config.parallelism,
                )
    finally:
        client.cancel().result()
    assert sorted(updates) == [
        (n, s) for n in range(NODES) for s in range(1, STEPS + 1)
    ]  # one per node, step
    return got, [updates[k] for k in sorted(updates)]


def test_lu_job_equals_core_and_restores_exactly_once(flink_broker, tmp_path) -> None:
    topic, per_node = produce(flink_broker.bootstrap)
    config = job(flink_broker.bootstrap, topic, fresh_name("cm-lu"))
    config = replace(
        config, hooks=replace(config.hooks, fail_marker=str(tmp_path / "failed"), fail_after=100)
    )
    got, updates = run(config)
    assert (tmp_path / "failed").exists()  # the failure did happen (node 0, mid-stream)
    want, words = core_releases(config.settings, per_node, config.hooks)
    assert got == want and any(want)
    assert sum(u["words"] for u in updates) == words
    print(f"\ncontinual-monitor lu: {words} words over {NODES} nodes x {STEPS} steps")


def test_bf_job_equals_core(flink_broker, tmp_path) -> None:
    topic, per_node = produce(flink_broker.bootstrap)
    prefix = fresh_name("cm-bf")
    keys = write_keys(tmp_path / "keys", NODES)
    config = job(
        flink_broker.bootstrap, topic, prefix, mode="bf", keys_dir=str(keys), delta=0.01, session=prefix
    )
    # at parallelism 2: the routing keys put node 0 in one sub-task, nodes 1 and 2 in the other
    # (docs/deploy.md); the releases are still the core's, as at parallelism 1
    config = replace(config, flink_conf=(("rest.port", str(free_port())),), parallelism=2)
    # the operators' metrics (no failure in this run): every event counted by its node, every
    # node's step closed, every step released by the aggregator
    events = sum(len(step) for node in per_node for step in node)
    got, updates = run(config, {"eventsCounted": events, "epochsClosed": NODES * STEPS, "releases": STEPS})
    want, cells = core_releases(config.settings, per_node, config.hooks)
    assert got == want and any(want)
    assert sum(u["words"] for u in updates) == cells > 0  # every cell, zeros included, was sent
    print(
        f"\ncontinual-monitor bf: {cells} masked cells ({8 * cells} bytes) over {NODES} nodes x {STEPS} steps"
    )


def test_lu_job_at_parallelism_2_on_two_taskmanagers(flink_broker, two_taskmanager_cluster) -> None:
    """``flink run -py`` on PyFlink's own standalone cluster, two TaskManagers of one slot each, at
    ``--parallelism 2``: one node sub-task in each TaskManager, both reading events (the routing
    keys put node 0 in one, nodes 1 and 2 in the other), and the releases are the core protocols'
    — the releases of the parallelism-1 run of the same stream and noise seed
    (test_lu_job_equals_core_and_restores_exactly_once)."""
    cluster = two_taskmanager_cluster
    topic, per_node = produce(flink_broker.bootstrap)
    prefix = fresh_name("cm-cluster")
    script = Path(__file__).parent / "jobs" / "seeded_continual_monitor.py"
    checkpoints = str(cluster.workdir / "checkpoints")
    proc = cluster.submit(script, flink_broker.bootstrap, topic, prefix, "2", checkpoints, detached=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    config = job(flink_broker.bootstrap, topic, prefix)
    [running] = cluster.rest("/jobs/overview")["jobs"]
    try:
        got = released(flink_broker.bootstrap, config)
        # one node sub-task in each TaskManager, both reading events
        assert_subtasks_read(
            cluster.rest, running["jid"], lambda name: name.startswith("node"), 2, taskmanagers=2
        )
    finally:
        cluster.cancel(running["jid"])
    want, _ = core_releases(config.settings, per_node, config.hooks)
    assert got == want and any(want)
