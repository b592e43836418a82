"""The continual-monitor node operator's open steps (issue 25): a message writes one state entry
holding its own events (:class:`~privstream.operators.continual_logic.OpenSteps`), not its step's
items so far; the updates equal the Flink-free node's, and a restore from a checkpoint before any
message sends what an unbroken run sends.

The real operator body (:class:`~privstream.operators.continual_operator.ContinualNodeFunction`)
runs on in-memory stand-ins of its Flink state (tests/test_several_bad_messages.py); a checkpoint
is a deep copy of that state, a restore a fresh function on the copy fed the messages after the
checkpoint, as Flink replays them from the checkpointed Kafka offsets. Deterministic: the noise
keys come from the tests' public seed.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from privstream.connectors.avro_codec import decode
from privstream.operators.continual_logic import ContinualNode, OpenSteps
from privstream.operators.continual_operator import ContinualNodeFunction
from privstream.operators.epochs import ShardProgress
from privstream.operators.payloads import decode_payload
from privstream.operators.unflushed import UnflushedMessages

from tests.test_continual_logic import HOOKS, STEP_MS, settings, streams
from tests.test_several_bad_messages import (
    ContextStub,
    ListStateStub,
    MapStateStub,
    ValueStateStub,
    batch,
    watermark,
)

STATE = ("sketches", "progress", "protocol", "step_pieces")


def _messages() -> list[bytes]:
    """Node 0's stream: the clock's start, then per step three messages of its events (some empty)
    and the punctuation that closes it."""
    out = [watermark(0)]
    for t, items in enumerate(streams(5)[0]):
        for part in np.array_split(items, 3):
            out.append(batch([int(x) for x in part], t * STEP_MS + 5))
        out.append(watermark((t + 1) * STEP_MS))
    return out


def _function(state: dict[str, Any] | None = None) -> ContinualNodeFunction:
    """The operator on stub state (``state``: a checkpoint's copy), as ``open()`` leaves it."""
    f = ContinualNodeFunction(settings(), "events", HOOKS)
    state = state or {
        "sketches": MapStateStub(),
        "progress": ValueStateStub(),
        "protocol": ValueStateStub(),
        "step_pieces": MapStateStub(),
        "since": ListStateStub(),
    }
    for name in STATE:
        setattr(f, name, state[name])
    f.since = UnflushedMessages(state["since"])
    f.loaded, f.open_steps, f._live, f._sizes = {}, {}, {}, {}
    return f


def _state_of(f: ContinualNodeFunction) -> dict[str, Any]:
    return copy.deepcopy({**{name: getattr(f, name) for name in STATE}, "since": f.since.state})


def _feed(f: ContinualNodeFunction, messages: list[bytes], first_offset: int = 0) -> list[dict[str, Any]]:
    out = []
    for offset, message in enumerate(messages, start=first_offset):
        for item in f.process_element((message, 0, offset), ContextStub()):
            assert isinstance(item, bytes), item  # no dead letters in this stream
            out.append(_comparable(item))
    return out


def _comparable(update: bytes) -> dict[str, Any]:
    """An update without its wall-clock ``update_time``."""
    record = dict(decode(update)[1])
    record.pop("update_time")
    return record


def test_the_operator_sends_the_nodes_updates_and_restores_from_any_message() -> None:
    messages = _messages()
    node = ContinualNode(0, settings(), None, {}, ShardProgress(), hooks=HOOKS)
    reference = [_comparable(u) for m in messages for u in node.add(decode_payload(m, user_sets=False))[0]]
    assert len(reference) == len(streams(5)[0])  # one update per closed step
    live = _function()
    emitted: list[dict[str, Any]] = []
    checkpoints = {}
    for i, message in enumerate(messages):
        checkpoints[i] = (_state_of(live), len(emitted))  # a checkpoint before message i
        emitted += _feed(live, [message], i)
    assert emitted == reference
    for i, (state, already) in checkpoints.items():
        restored = _function(copy.deepcopy(state))
        assert emitted[:already] + _feed(restored, messages[i:], i) == reference, i


def test_a_message_writes_only_its_own_events() -> None:
    """Inside a step, each message adds one entry of 8 bytes per event and leaves the step's
    earlier entries as they were; the punctuation that closes the step removes them all."""
    f = _function()
    _feed(f, [watermark(0)])
    pieces: MapStateStub = f.step_pieces  # type: ignore[assignment]
    for n, events in enumerate((5, 3, 7)):
        before = dict(pieces.data)
        _feed(f, [batch(list(range(events)), 5)], 1 + n)
        added = {k: v for k, v in pieces.data.items() if k not in before}
        assert [len(v) for v in added.values()] == [8 * events]
        assert all(pieces.data[k] is v for k, v in before.items())
    assert sorted(pieces.data) == ["0:0", "0:1", "0:2"]
    _feed(f, [watermark(STEP_MS)], 4)
    assert pieces.data == {}


def test_open_steps_keep_each_steps_items_in_arrival_order() -> None:
    store: dict[str, bytes] = {}
    steps = OpenSteps(store)
    steps.append(2, b"a")
    steps.append(1, b"b")
    steps.append(2, b"c")
    again = OpenSteps(dict(store))  # as after a restore: the pieces read from the keys
    for s in (steps, again):
        assert s.epochs() == [1, 2]
        assert (s.take(2), s.take(1), s.take(3)) == (b"ac", b"b", b"")
        assert s.epochs() == [] and s.store == {}
