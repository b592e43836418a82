"""Per-event verification that a partition holds only events the data-independent partitioner put there.

The job's guarantee treats each Kafka partition as one shard stream of Lebeda–Tětek Cor. 7.2 (one
event added to or removed from one shard, every other shard unchanged). That holds only if an
event's partition depends on the event alone: a hash of its item (``--shard-key item``) or of its
user (``--shard-key user``; user-level jobs always), as :func:`privstream.partitioning.partition_for`
computes it. Round-robin or sticky partitioning place events by position, so one removed event moves
every later event to another shard. The job cannot see the producer, but it can recompute the hash
of every event it reads: a message holding any event the hash puts elsewhere is dead-lettered whole,
with this module's reason, and nothing of it is counted.
"""

from __future__ import annotations

import numpy as np
from privstream.operators.payloads import EventPayload, Payload, UserSetPayload

from privstream.partitioning import partition_for

SHARD_KEYS = ("item", "user")


def routing_error(payload: Payload, partition: int, partitions: int, shard_key: str) -> str | None:
    """Why ``payload`` (read from ``partition`` of ``partitions``) breaks the partitioner, or None."""
    if partitions == 1 or not isinstance(payload, EventPayload | UserSetPayload):
        return None
    if isinstance(payload, UserSetPayload):
        keys: list[object] = [payload.user_id]
    elif shard_key == "item":
        keys = payload.items.tolist() if isinstance(payload.items, np.ndarray) else list(payload.items)
    else:
        keys = list(payload.users)
        if len(keys) != len(payload) or any(u is None for u in keys):
            return (
                "misrouted: --shard-key user needs a user id on every event (produce with --key user and "
                "--users); the job cannot verify this message's partitioning, so none of it is counted"
            )
    if not keys:
        return None
    wrong = int((partition_for(keys, partitions) != partition).sum())
    if wrong == 0:
        return None
    return (
        f"misrouted: {wrong} of {len(keys)} event(s) hash (by {shard_key}) to another partition than "
        f"{partition} of {partitions}; produce with a hash of the {shard_key} (privstream produce --key "
        f"{shard_key}, EventProducer(key_by={shard_key!r})): position-based partitioning (round-robin, "
        "sticky) lets one event move every later event to another shard and breaks the job's "
        "neighbour relation, so none of this message is counted"
    )
