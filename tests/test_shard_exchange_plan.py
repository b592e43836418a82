"""The shards' input is keyed in the JVM (issue 25): between the Kafka source and the per-shard
operator's hash exchange there is no Python operator.

A Python key selector (``key_by(lambda …)``) makes PyFlink add a Python map,
``_stream_key_by_map_operator``, at the source's parallelism (1): every event would cross into
Python and back once before the exchange, serially. The jobs' source computes each partition's
routing key in its SQL query and keys with Flink's own selector instead
(:func:`privstream.operators.kafka_io.events_source` with ``shards``). This test reads the
execution plan of the heavy-hitters job at parallelism 2 (built, not run: no broker is needed) and
checks the chain from the source to the shards' exchange.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyflink")

from privstream.jobs.config import HeavyHittersConfig  # noqa: E402
from privstream.jobs.job import HeavyHittersJob, KafkaInputs  # noqa: E402
from privstream.operators.release_logic import new_ledger  # noqa: E402
from privstream.operators.shard_keys import shard_keys  # noqa: E402

SHARDS = 4


def test_the_shards_exchange_follows_the_source_with_no_python_operator_before_it() -> None:
    config = HeavyHittersConfig(
        epsilon=1.0, delta=1e-6, k=16, epoch=1000, topic="events", bootstrap="localhost:1", parallelism=2
    )
    job = HeavyHittersJob(config)
    env = job.environment()
    ledger = new_ledger(config.release, config.spec, config.policy).to_bytes()
    job.build(env, KafkaInputs(SHARDS, {p: 10 for p in range(SHARDS)}, ledger))
    nodes = {n["id"]: n for n in json.loads(env.get_execution_plan())["nodes"]}
    (shard,) = [n for n in nodes.values() if n["contents"].startswith("shard sketch")]
    assert shard["parallelism"] == 2
    (exchange,) = shard["predecessors"]
    assert exchange["ship_strategy"] == "HASH"
    chain = []  # from the exchange back to the source, every node forwarded from one input
    node = nodes[exchange["id"]]
    while node.get("predecessors"):
        chain.append(node)
        (before,) = node["predecessors"]
        assert before["ship_strategy"] == "FORWARD", node["contents"]
        node = nodes[before["id"]]
    assert node["contents"].startswith("Source: KafkaSource")
    assert not [n["contents"] for n in chain if "_stream_key_by_map_operator" in n["contents"]]
    assert all(n["parallelism"] == 1 and n["type"].startswith(("Calc", "SinkConversion")) for n in chain), (
        chain
    )
    (calc,) = [n for n in chain if n["type"].startswith("Calc")]
    keys = shard_keys(SHARDS)  # the routing keys, computed in the query, partition by partition
    assert all(f"(part = {p}), {key}" in calc["contents"] for p, key in enumerate(keys)), calc["contents"]
