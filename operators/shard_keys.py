"""Flink routing keys that spread a job's shards evenly over the per-shard operator's sub-tasks.

Flink gives a key to one of ``max_parallelism`` key groups by a hash of the key, and each of an
operator's p sub-tasks a contiguous range of key groups (``KeyGroupRangeAssignment``). Keyed by the
shard number itself, shards land where that hash puts them: two shards both in sub-task 0 at
parallelism 2, and sub-task 2 idle with eight shards at parallelism 4. The per-shard operators are
therefore keyed by a *routing key* per shard: the smallest non-negative integer whose key group is
the middle of the shard's S-way share of the key groups, ⌊(2s + 1)·M / (2S)⌋ (S shards, M key
groups). Sub-task ⌊g·p / M⌋ then holds shard s for g its key group, so at every parallelism p
that divides M (1, 2, 4, …, 128) each sub-task holds ⌊S/p⌋ or ⌈S/p⌉ consecutive shards, and at any
other p ≤ S ≤ M the sub-tasks' shard counts differ by at most 2 (a sub-task may then be idle when
p is close to S: tests/test_shard_keys.py). The placement never depends on the data: the routing keys are a function of S alone, and each shard's input is its Kafka
partition (or its hash share of the user's stream) whatever the sub-task, so no neighbour relation
changes (docs/privacy.md).

:func:`key_group` is Flink's own assignment, computed here so a job graph is built without a JVM
round trip per key (tests/test_shard_keys.py checks it against Flink's ``KeyGroupRangeAssignment``):
PyFlink's ``key_by(selector, key_type=Types.INT())`` keys by ``Row.of(key)``, whose ``hashCode``
(``RowUtils.deepHashCodeRow`` of a one-field INSERT row) is ``62 + key`` in 32-bit arithmetic, and
the key group is ``murmurHash(hashCode) % M`` (``org.apache.flink.util.MathUtils``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The per-shard operators' maximum parallelism (the number of key groups), set explicitly so the
#: routing keys, and the state's key groups in a savepoint, do not depend on the parallelism.
MAX_PARALLELISM = 128

_MASK = 0xFFFFFFFF


def _int32(x: int) -> int:
    x &= _MASK
    return x - (1 << 32) if x & 0x80000000 else x


def _rotl(x: int, n: int) -> int:
    x &= _MASK
    return ((x << n) | (x >> (32 - n))) & _MASK


def _murmur_hash(code: int) -> int:
    """``MathUtils.murmurHash(int)``: a non-negative int."""
    code = (code * 0xCC9E2D51) & _MASK
    code = _rotl(code, 15)
    code = (code * 0x1B873593) & _MASK
    code = _rotl(code, 13)
    code = (code * 5 + 0xE6546B64) & _MASK
    code ^= 4
    code ^= code >> 16  # bitMix
    code = (code * 0x85EBCA6B) & _MASK
    code ^= code >> 13
    code = (code * 0xC2B2AE35) & _MASK
    code ^= code >> 16
    signed = _int32(code)
    if signed >= 0:
        return signed
    return -signed if signed != -(1 << 31) else 0


def key_group(key: int, max_parallelism: int = MAX_PARALLELISM) -> int:
    """The key group of the PyFlink key ``Row.of(key)`` (``key``: a Java int)."""
    row_hash = _int32(62 + key)
    return _murmur_hash(row_hash) % max_parallelism


def subtask_of(key: int, parallelism: int, max_parallelism: int = MAX_PARALLELISM) -> int:
    """The sub-task (of ``parallelism``) that holds ``key``
    (``KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup``)."""
    return key_group(key, max_parallelism) * parallelism // max_parallelism


def shard_keys(shards: int, max_parallelism: int = MAX_PARALLELISM) -> tuple[int, ...]:
    """Each shard's routing key (module docstring): distinct non-negative ints."""
    if shards < 1:
        raise ValueError(f"shards: must be >= 1, got {shards}")
    keys: list[int] = []
    taken: set[int] = set()
    for s in range(shards):
        target = (2 * s + 1) * max_parallelism // (2 * shards)
        key = 0
        while key in taken or key_group(key, max_parallelism) != target:
            key += 1
        keys.append(key)
        taken.add(key)
    return tuple(keys)


class ShardRouting:
    """The routing keys of ``shards`` shards and the way back from a key to its shard (timers get
    the current key, not the shard)."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self.keys = shard_keys(shards)
        self._shard_of = {key: s for s, key in enumerate(self.keys)}

    def key(self, shard: int) -> int:
        return self.keys[shard]

    def shard(self, key: int) -> int:
        return self._shard_of[int(key)]


def process_by_shard(
    stream: Any, shards: int, shard_of: Callable[[Any], int] | None, function: Any, output_type: Any
) -> Any:
    """``stream`` keyed by each element's shard's routing key (``shard_of``: the element's shard),
    processed by ``function`` at :data:`MAX_PARALLELISM` key groups: the one way every per-shard
    operator is keyed. ``shard_of=None``: ``stream`` is keyed by the routing keys already (the jobs'
    Kafka source, :func:`~privstream.operators.kafka_io.events_source` with ``shards``)."""
    from pyflink.common import Types

    if shard_of is None:
        keyed = stream
    else:
        keys = shard_keys(shards)
        keyed = stream.key_by(lambda v: keys[shard_of(v)], key_type=Types.INT())
    return keyed.process(function, output_type=output_type).set_max_parallelism(MAX_PARALLELISM)
