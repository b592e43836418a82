"""The stable partitioner shared by producers and the jobs that verify it.

An event's partition is a hash of its key (the item, or the user for user-level streams) modulo the
partition count: splitmix64 for ints, xxh64 of the UTF-8 bytes for strings. It depends on the event
alone, never on its position, so adding or removing one event changes exactly one partition's
stream (Lebeda–Tětek Cor. 7.2 needs exactly that of the shards it merges). The heavy-hitters job
recomputes it for every event it reads (:mod:`privstream.operators.routing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = values.astype(np.int64).view(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def partition_for(keys: np.ndarray | Sequence[Any], num_partitions: int) -> np.ndarray:
    """Stable partition per key: splitmix64 (ints) or xxh64 of UTF-8 (strings), modulo ``num_partitions``."""
    keys = np.asarray(keys)
    if keys.dtype.kind in "iu":
        hashes = _splitmix64(keys)
    else:
        hashes = np.fromiter(
            (
                xxhash.xxh64_intdigest(k.encode())
                if isinstance(k, str)
                else int(_splitmix64(np.array([k]))[0])
                for k in keys.tolist()
            ),
            dtype=np.uint64,
            count=len(keys),
        )
    return (hashes % np.uint64(num_partitions)).astype(np.int64)
