"""A user's stream elements → the sketch operator's payloads, sharded by a hash (no Flink here).

The public operators (:mod:`privstream.flink`) take a ``DataStream`` the user built. Its elements are

* event level (MG): a plain item (``int`` or ``str``), or a tuple/``Row`` ``(item, user, event_time)``
  where ``user`` may be None and ``event_time`` is milliseconds (needed by time epochs);
* user level (PAMG, ``m`` given): a tuple/``Row`` ``(user, items, event_time)``: one user's set of
  ≤ m distinct items.

The shard is :func:`privstream.partitioning.partition_for` of the item (or the user: user level, or
``shard_key="user"``), computed here from the element alone, so removing one element changes one
shard's stream and no other (Lebeda–Tětek Cor. 7.2, the relation the releases state); no user can
shard by position by mistake. An element that does not fit is a :class:`Rejection` with the reason,
never dropped silently.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from privstream.operators.payloads import EventPayload, UserSetPayload

from privstream.partitioning import partition_for
from privstream.sketches.order import INT64_MAX, INT64_MIN


class Rejection(ValueError):
    """An element that cannot be counted; the message is the reason."""


def _fields(element: Any, arity: int) -> tuple[Any, ...]:
    if isinstance(element, str | int) or not hasattr(element, "__len__"):
        return (element,)
    values = tuple(element)
    if len(values) != arity:
        raise Rejection(f"expected {arity} fields, got {len(values)}")
    return values


def _time(value: Any, needs_time: bool) -> int:
    if value is None:
        if needs_time:
            raise Rejection("no event time: time epochs need (item, user, event_time) elements")
        return 0
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise Rejection(f"event_time must be an int (ms), got {type(value).__name__}")
    return _in_int64(value, "event_time")  # the payloads hold times as int64


def _key(value: Any, what: str) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str | np.integer):
        raise Rejection(f"{what} must be an int or a str, got {type(value).__name__}")
    return value if isinstance(value, str) else _in_int64(value, what)


def _in_int64(value: int | np.integer, what: str) -> int:
    """``value`` as an ``int``; a Rejection naming ``what`` outside the signed 64-bit range."""
    if not INT64_MIN <= int(value) <= INT64_MAX:
        raise Rejection(f"{what} {value} is outside the 64-bit integer range")
    return int(value)


def element_payload(
    element: Any, *, user_level: bool, shard_key: str, shards: int, needs_time: bool
) -> tuple[int, EventPayload | UserSetPayload]:
    """``(shard, payload)`` of one element; raises :class:`Rejection` naming what is wrong."""
    if user_level:
        user, items, when = _fields(element, 3)
        user = _key(user, "user")
        if isinstance(items, str | bytes) or not hasattr(items, "__iter__"):
            raise Rejection("items must be a collection of a user's distinct items")
        items = tuple(_key(x, "item") for x in items)
        payload: EventPayload | UserSetPayload = UserSetPayload(user, items, _time(when, needs_time))
        key: int | str = user
    else:
        fields = _fields(element, 3)
        item, user, when = fields if len(fields) == 3 else (fields[0], None, None)
        item = _key(item, "item")
        if shard_key == "user":
            if user is None:
                raise Rejection("shard_key='user' needs a user on every element")
            user = _key(user, "user")
        column = np.array([item], dtype=np.int64) if isinstance(item, int) else [item]
        payload = EventPayload(column, np.array([_time(when, needs_time)], dtype=np.int64), (user,))
        key = user if shard_key == "user" else item
    return int(partition_for([key], shards)[0]), payload
