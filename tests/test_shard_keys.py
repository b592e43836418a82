"""The per-shard operators' routing keys (operators/shard_keys.py): the key group computed in Python
is Flink's own (``KeyGroupRangeAssignment`` in this PyFlink's JVM, on the key PyFlink builds for
``key_by(..., key_type=Types.INT())``), and the routing keys give every sub-task ⌊S/p⌋ or ⌈S/p⌉
shards at every parallelism p ≤ S that divides the key groups."""

from __future__ import annotations

import pytest
from privstream.operators.shard_keys import MAX_PARALLELISM, ShardRouting, key_group, shard_keys, subtask_of

KEYS = [*range(-40, 700), 2**31 - 1, 2**31 - 62, 2**31 - 63, -(2**31), -(2**31) + 5]


def test_key_groups_are_flinks() -> None:
    from pyflink.java_gateway import get_gateway

    gateway = get_gateway()
    jvm = gateway.jvm
    assign = jvm.org.apache.flink.runtime.state.KeyGroupRangeAssignment.assignToKeyGroup
    operator_index = jvm.org.apache.flink.runtime.state.KeyGroupRangeAssignment.assignKeyToParallelOperator
    for max_parallelism in (MAX_PARALLELISM, 256):
        for key in KEYS:
            fields = gateway.new_array(jvm.Object, 1)
            fields[0] = jvm.java.lang.Integer(key)
            row = jvm.org.apache.flink.types.Row.of(fields)  # what PyFlink's KeyByKeySelector keys by
            assert key_group(key, max_parallelism) == assign(row, max_parallelism), (key, max_parallelism)
            if max_parallelism == MAX_PARALLELISM and 0 <= key < 64:
                for p in (2, 3, 4):
                    assert subtask_of(key, p) == operator_index(row, MAX_PARALLELISM, p), (key, p)


def test_every_subtask_gets_its_share_of_the_shards() -> None:
    """At a parallelism p that divides the 128 key groups (1, 2, 4, …, 128) every sub-task holds
    ⌊S/p⌋ or ⌈S/p⌉ consecutive shards; at any other p ≤ S the sub-tasks' shard counts differ by at
    most 2 (all S ≤ 128)."""
    for shards in range(1, MAX_PARALLELISM + 1):
        keys = shard_keys(shards)
        assert len(set(keys)) == shards and min(keys) >= 0
        for p in range(1, shards + 1):
            subtasks = [subtask_of(k, p) for k in keys]
            assert subtasks == sorted(subtasks)  # consecutive shards per sub-task
            held = [subtasks.count(i) for i in range(p)]
            if MAX_PARALLELISM % p == 0:
                assert set(held) <= {shards // p, -(-shards // p)}, (shards, p, held)
            else:
                assert max(held) - min(held) <= 2, (shards, p, held)


def test_a_timer_key_maps_back_to_its_shard() -> None:
    routing = ShardRouting(6)
    assert [routing.shard(routing.key(s)) for s in range(6)] == list(range(6))
    with pytest.raises(KeyError):
        routing.shard(max(routing.keys) + 1000)
    with pytest.raises(ValueError, match="shards"):
        shard_keys(0)
