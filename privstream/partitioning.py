"""The data-independent partitioner: an event's shard is a stable hash of its own key.

An event's partition is a hash of its key (the item, or the user for user-level streams) modulo the
partition count: the SplitMix64 finaliser of ``x + γ`` for ints, xxh64 of the UTF-8 bytes for
strings. It depends on the event alone, never on its position, so adding or removing one event
changes exactly one partition's stream — what Lebeda–Tětek Cor. 7.2 (and Cor. 8.10 for users)
needs of the sub-streams it merges. Producers use it to choose Kafka partitions, and the
heavy-hitters job recomputes it for every event it reads (:mod:`privstream.operators.routing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

from privstream.sketches.hashing import mix64

_GAMMA = np.uint64(0x9E3779B97F4A7C15)


def _int_hashes(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return mix64(np.asarray(values, dtype=np.int64).view(np.uint64) + _GAMMA)


def partition_for(keys: np.ndarray | Sequence[Any], num_partitions: int) -> np.ndarray:
    """Stable partition per key (ints and strings, mixed allowed), modulo ``num_partitions``.

    A sequence that is not all ints is read as an object column, never as a numpy string array:
    that would turn ints into their decimal text and drop a string's trailing NUL characters, so
    the same key would hash differently as a list than as the object column the job's routing
    check reads."""
    if not isinstance(keys, np.ndarray):
        keys = np.asarray(keys) if all(type(k) is int for k in keys) else np.asarray(keys, dtype=object)
    if keys.dtype.kind in "iu":
        hashes = _int_hashes(keys)
    else:
        hashes = np.fromiter(
            (
                xxhash.xxh64_intdigest(k.encode())
                if isinstance(k, str)
                else int(_int_hashes(np.array([k]))[0])
                for k in keys.tolist()
            ),
            dtype=np.uint64,
            count=len(keys),
        )
    return (hashes % np.uint64(num_partitions)).astype(np.int64)
