"""The per-event routing check (operators/routing.py) on every payload shape and shard key.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py routing``): each test
states the partitioner's law (an event belongs to ``partition_for(key) % partitions``) for a path
the job-logic tests reach with one message only: user sets, list-typed items (mixed ints and
strings), user-keyed events with missing or short user columns, and several wrong events in one
message (the count in the reason).
"""

from __future__ import annotations

import numpy as np
import pytest
from privstream.operators.payloads import EndPayload, EventPayload, UserSetPayload
from privstream.operators.routing import routing_error

from privstream.partitioning import partition_for

PARTS = 4


def _home(key: object) -> int:
    """The partition the data-independent partitioner assigns to ``key`` (ints and strings)."""
    column = np.asarray([key], dtype=object)
    return int(partition_for(column, PARTS)[0])


def _keys_on(partition: int, candidates: list[object], count: int) -> list[object]:
    out = [k for k in candidates if _home(k) == partition][:count]
    assert len(out) == count, "not enough candidate keys hash to the partition"
    return out


def _keys_off(partition: int, candidates: list[object], count: int) -> list[object]:
    out = [k for k in candidates if _home(k) != partition][:count]
    assert len(out) == count
    return out


INTS: list[object] = list(range(200))
STRS: list[object] = [f"item-{i}" for i in range(200)]
# Digit strings: if ints and strings were ever put in one numpy column, the ints would become
# these strings and hash as strings (another partition for most of them).
DIGITS: list[object] = list(range(1000, 1400))


def _events(items: list[object] | np.ndarray, users: tuple[object, ...] = ()) -> EventPayload:
    return EventPayload(items, np.arange(len(items), dtype=np.int64), users)


def test_a_user_set_is_checked_by_its_user_id() -> None:
    user = _keys_on(2, INTS, 1)[0]
    other = _keys_off(2, INTS, 1)[0]
    assert routing_error(UserSetPayload(user, ("a", "b"), 5), 2, PARTS, "user") is None
    reason = routing_error(UserSetPayload(other, ("a",), 5), 2, PARTS, "user")
    assert reason is not None and reason.startswith("misrouted: 1 of 1 event(s)")
    # the user id decides, whatever the shard key and the items
    assert routing_error(UserSetPayload(other, tuple(_keys_on(2, INTS, 3)), 5), 2, PARTS, "item") is not None


def test_list_items_of_mixed_ints_and_strings_are_hashed_each_by_its_own_type() -> None:
    ints = [k for k in DIGITS if _home(k) == 1 and _home(str(k)) != 1][:3]
    strs = _keys_on(1, STRS, 3)
    assert len(ints) == 3
    mixed: list[object] = [ints[0], strs[0], ints[1], strs[1], ints[2], strs[2]]
    assert routing_error(_events(mixed), 1, PARTS, "item") is None
    assert routing_error(_events([str(k) for k in ints]), 1, PARTS, "item") is not None
    # strings only, and ints only, as lists
    assert routing_error(_events(list(strs)), 1, PARTS, "item") is None
    assert routing_error(_events(list(ints)), 1, PARTS, "item") is None


def test_several_wrong_events_in_one_message_are_all_counted() -> None:
    good = _keys_on(3, INTS, 4)
    bad = _keys_off(3, INTS, 3)
    items = np.array([good[0], bad[0], good[1], bad[1], good[2], bad[2], good[3]], dtype=np.int64)
    reason = routing_error(_events(items), 3, PARTS, "item")
    assert reason is not None
    assert reason.startswith("misrouted: 3 of 7 event(s) hash (by item) to another partition than 3 of 4")
    good_s, bad_s = _keys_on(3, STRS, 2), _keys_off(3, STRS, 2)
    reason = routing_error(_events([good_s[0], bad_s[0], bad_s[1], good_s[1]]), 3, PARTS, "item")
    assert reason is not None and reason.startswith("misrouted: 2 of 4 event(s)")


def test_user_keyed_events_are_checked_by_their_users_not_their_items() -> None:
    users = tuple(_keys_on(0, STRS, 3))
    wrong_items = _keys_off(0, INTS, 3)
    assert routing_error(_events(wrong_items, users), 0, PARTS, "user") is None
    assert routing_error(_events(_keys_on(0, INTS, 3), users), 0, PARTS, "item") is None
    bad_users = (users[0], _keys_off(0, STRS, 1)[0], users[1])
    reason = routing_error(_events(wrong_items, bad_users), 0, PARTS, "user")
    assert reason is not None and reason.startswith("misrouted: 1 of 3 event(s) hash (by user)")


@pytest.mark.parametrize(
    "users",
    [
        (),  # no user column at all
        ("u1", "u2"),  # shorter than the message
        ("u1", None, "u3"),  # one event without a user id
    ],
)
def test_user_keyed_events_without_a_user_id_on_every_event_are_refused(users: tuple[object, ...]) -> None:
    routed = tuple(_keys_on(0, STRS, 3))
    items = [1, 2, 3]
    full = tuple(u if u is None else routed[i] for i, u in enumerate(users))
    reason = routing_error(_events(items, full), 0, PARTS, "user")
    assert reason is not None
    assert reason.startswith("misrouted: --shard-key user needs a user id on every event")


def test_one_partition_and_non_event_payloads_are_never_misrouted() -> None:
    items = _keys_off(0, INTS, 3)
    assert routing_error(_events(items), 0, 1, "item") is None
    assert routing_error(EndPayload("p", 3), 0, PARTS, "item") is None
    assert routing_error(_events([]), 0, PARTS, "item") is None


@pytest.mark.parametrize("key", ["ab\x00", "\x00", "x\x00\x00", 17])
def test_a_key_hashes_the_same_as_a_list_as_an_object_column_and_in_the_check(key: object) -> None:
    """A string with trailing NUL characters (Avro strings may carry them) keeps them: a numpy
    string array would drop them and hash another key. The list form, the object column and the
    routing check agree on the key's partition; a typed element of the public operators goes to
    exactly that shard (operators/elements.py)."""
    from privstream.operators.elements import element_payload

    home = _home(key)
    assert int(partition_for([key], PARTS)[0]) == home
    shard, payload = element_payload(
        (key, None, 5), user_level=False, shard_key="item", shards=PARTS, needs_time=False
    )
    assert shard == home
    assert routing_error(payload, shard, PARTS, "item") is None


def test_a_list_of_mixed_keys_hashes_each_key_by_its_own_type() -> None:
    """``partition_for`` on a list with ints and strings: each int by its integer hash, each string
    by its bytes (not the decimal text of the ints)."""
    keys = [1, "a", 2, "b\x00"]
    assert partition_for(keys, PARTS).tolist() == [_home(k) for k in keys]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.uint32, np.int64])
def test_int_keys_of_any_width_hash_as_their_int64_value(dtype: type) -> None:
    """The partition of an int key is a function of its value, not of the array's dtype: the same
    keys as int8/int32/uint16/uint32 arrays go where their int64 copies go, and the partitions are
    int64 (usable as indices)."""
    values = [0, 1, 7, 100, 127]
    narrow = partition_for(np.array(values, dtype=dtype), 7)
    assert narrow.dtype == np.int64
    assert narrow.tolist() == partition_for(np.array(values, dtype=np.int64), 7).tolist()
    assert narrow.tolist() == [int(partition_for([v], 7)[0]) for v in values]
