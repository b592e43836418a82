"""A user's stream elements → payloads (operators/elements.py): every element that cannot be
counted is a Rejection naming the reason (the public operators dead-letter it), never a crash of
the operator and never a silent drop."""

from __future__ import annotations

import numpy as np
import pytest
from privstream.operators.elements import Rejection, element_payload

EVENT = {"user_level": False, "shard_key": "item", "shards": 2, "needs_time": True}
USER = {"user_level": True, "shard_key": "user", "shards": 2, "needs_time": True}


@pytest.mark.parametrize(
    ("element", "kind"),
    [
        ((1, None, 2**63), EVENT),
        ((1, None, -(2**63) - 1), EVENT),
        ((7, (1, 2), 2**63), USER),
        ((7, (1, 2), np.uint64(2**63)), USER),
    ],
)
def test_an_event_time_outside_int64_is_rejected_with_the_reason(element: tuple, kind: dict) -> None:
    with pytest.raises(Rejection) as rejected:
        element_payload(element, **kind)
    assert str(rejected.value) == f"event_time {element[2]} is outside the 64-bit integer range"


@pytest.mark.parametrize("when", [2**63 - 1, -(2**63), 0, np.int64(5)])
def test_event_times_at_the_int64_bounds_are_counted(when: int) -> None:
    _, payload = element_payload((1, None, when), **EVENT)
    assert payload.times.tolist() == [int(when)]
    _, user_set = element_payload((7, (1, 2), when), **USER)
    assert user_set.time == int(when)


@pytest.mark.parametrize(
    ("element", "kind", "reason"),
    [
        ((1, None, None), EVENT, "no event time: time epochs need (item, user, event_time) elements"),
        ((1, None, 1.5), EVENT, "event_time must be an int (ms), got float"),
        ((1, None, True), EVENT, "event_time must be an int (ms), got bool"),
        ((1, 2), EVENT, "expected 3 fields, got 2"),
        ((2**63, None, 0), EVENT, "item 9223372036854775808 is outside the 64-bit integer range"),
        ((7, "ab", 0), USER, "items must be a collection of a user's distinct items"),
    ],
)
def test_other_bad_elements_are_rejected_naming_what_is_wrong(
    element: tuple, kind: dict, reason: str
) -> None:
    with pytest.raises(Rejection) as rejected:
        element_payload(element, **kind)
    assert str(rejected.value) == reason
