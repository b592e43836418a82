"""The sketch operator's live sketches (issue 25): O(events) per message, and a restore from any
checkpoint gives the same shard sketches, byte for byte, as a run without the failure.

The real operator body (:class:`~privstream.operators.sketch_operator.ShardSketchFunction`) runs on
in-memory stand-ins of its Flink state (tests/test_several_bad_messages.py). A checkpoint is a deep
copy of that state (the flushed sketches, the progress record and the messages since the last
flush); a restore is a fresh function on the copy, fed the messages after the checkpoint, as Flink
replays them from the checkpointed Kafka offsets. Compared with the reference — the shard logic
without live sketches, which loads and re-encodes the sketches at every message (the operator's
path before) — every emitted shard sketch is identical, for count and time epochs, MG and PAMG, at every
checkpoint position.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from privstream.operators.epochs import CountEpochs, ShardProgress, TimeEpochs
from privstream.operators.payloads import EventPayload, UserSetPayload, WatermarkPayload
from privstream.operators.shard_logic import ShardSketch, ShardSketcher
from privstream.operators.sketch_operator import ShardSketchFunction, TypedEvent
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.unflushed import UnflushedMessages

from tests.test_several_bad_messages import ContextStub, ListStateStub, MapStateStub, ValueStateStub

MESSAGES = 150  # over two flush periods (FLUSH_EVERY = 64) of messages that close no epoch


def messages(spec: SketchSpec, seed: int) -> list[Any]:
    """Shard 0's messages: a punctuation first and every 7th message; batches of 1..40 skewed items
    with rising times (PAMG: one user's set of up to 3 items per message). The 1-second time epochs
    close on punctuations only."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    t = 0
    for i in range(MESSAGES):
        if i % 7 == 0:
            out.append(WatermarkPayload("clock", t))
            continue
        n = int(rng.integers(1, 40))
        if spec.user_sets:
            items = tuple(int(x) for x in np.unique(np.minimum(rng.zipf(1.5, 3), 200)))
            out.append(UserSetPayload(i, items, t))
            t += 10
        else:
            out.append(EventPayload(np.minimum(rng.zipf(1.3, n), 500).astype(np.int64), t + np.arange(n)))
            t += n + int(rng.integers(0, 30))
    return out


def function(spec: SketchSpec, policy: Any, state: dict[str, Any] | None = None) -> ShardSketchFunction:
    """The operator on stub state (``state``: a checkpoint's copy), as ``open()`` leaves it."""
    f = ShardSketchFunction(spec, policy, "t", shards=1, typed=True)
    state = state or {"sketches": MapStateStub(), "progress": ValueStateStub(), "since": ListStateStub()}
    f.sketches, f.progress, f.since = state["sketches"], state["progress"], UnflushedMessages(state["since"])
    return f


def state_of(f: ShardSketchFunction) -> dict[str, Any]:
    return copy.deepcopy({"sketches": f.sketches, "progress": f.progress, "since": f.since.state})


def feed(f: ShardSketchFunction, payloads: list[Any]) -> list[ShardSketch]:
    out = []
    for payload in payloads:
        for item in f.process_element(TypedEvent(0, payload, None), ContextStub()):
            assert isinstance(item, ShardSketch), item  # nothing late or rejected in these streams
            out.append(item)
    return out


CASES = [
    (SketchSpec("mg", 16), CountEpochs(400)),
    (SketchSpec("mg", 16), TimeEpochs(1000)),
    (SketchSpec("mg", 16, release_mode="merged"), TimeEpochs(1000)),
    (SketchSpec("pamg", 16, m=3), CountEpochs(30)),
]


@pytest.mark.parametrize(("spec", "policy"), CASES, ids=["mg-count", "mg-time", "mg-merged", "pamg-count"])
def test_a_restore_from_any_checkpoint_emits_identical_sketches(spec: SketchSpec, policy: Any) -> None:
    payloads = messages(spec, seed=5)
    old = ShardSketcher(0, spec, policy, {}, ShardProgress(), 1)  # live=None: re-encode every message
    reference_out = [sketch for payload in payloads for sketch in old.add(payload)[0]]
    assert len([s for s in reference_out if s.epoch is not None]) >= 3
    live = function(spec, policy)
    emitted: list[ShardSketch] = []
    checkpoints = {}
    for i, payload in enumerate(payloads):
        checkpoints[i] = (state_of(live), len(emitted))  # a checkpoint before message i
        emitted += feed(live, [payload])
    assert emitted == reference_out  # the live path alone
    assert len(live.since.state.get()) > 0  # the run ended between flushes: the list is in use
    for i in (1, 30, 63, 64, 65, 100, 149):
        state, already = checkpoints[i]
        restored = function(spec, policy, copy.deepcopy(state))
        assert emitted[:already] + feed(restored, payloads[i:]) == reference_out, i


def test_a_message_costs_its_events_not_the_sketch() -> None:
    """Between flushes a message writes nothing but itself to state: the flushed sketch bytes stay
    untouched until an epoch closes or FLUSH_EVERY messages have been counted."""
    from privstream.operators.unflushed import FLUSH_EVERY

    spec, policy = SketchSpec("mg", 4096), CountEpochs(10**9)
    f = function(spec, policy)
    writes: list[int] = []
    put = f.sketches.put
    f.sketches.put = lambda key, value: (writes.append(len(value)), put(key, value))  # type: ignore[method-assign]
    payloads = [
        EventPayload(np.arange(i * 50, i * 50 + 50, dtype=np.int64), np.zeros(50, np.int64))
        for i in range(200)
    ]
    feed(f, payloads)
    assert len(writes) == 200 // FLUSH_EVERY  # one sketch write per flush, none per message
    assert len(f.since.state.get()) == 200 % FLUSH_EVERY


# ------------------------------------------------------------------ the continual-monitor's nodes


def node_function(state: dict[str, Any] | None = None) -> Any:
    """The continual node operator (typed mode) on stub state, as ``open()`` leaves it."""
    from privstream.operators.continual_operator import ContinualNodeFunction

    from tests.test_continual_logic import HOOKS, settings

    f = ContinualNodeFunction(settings(universe=600, window=4, step_ms=250), "t", HOOKS, typed=True)
    state = state or {
        "sketches": MapStateStub(), "progress": ValueStateStub(), "since": ListStateStub(),
        "protocol": ValueStateStub(),
    }  # fmt: skip
    f.sketches, f.progress, f.protocol = state["sketches"], state["progress"], state["protocol"]
    f.since, f._protocol_size = UnflushedMessages(state["since"]), 0
    return f


def node_state(f: Any) -> dict[str, Any]:
    return copy.deepcopy(
        {"sketches": f.sketches, "progress": f.progress, "since": f.since.state, "protocol": f.protocol}
    )


def decode_update(data: bytes) -> dict[str, Any]:
    """A ContinualUpdate record without its wall-clock ``update_time``."""
    from privstream.connectors.avro_codec import decode

    record = decode(data)[1]
    del record["update_time"]
    return record


def node_updates(f: Any, payloads: list[Any]) -> list[dict[str, Any]]:
    out = []
    for payload in payloads:
        for item in f.process_element(TypedEvent(0, payload, None), ContextStub()):
            assert isinstance(item, bytes), item  # nothing late or rejected in these streams
            out.append(decode_update(item))
    return out


def test_a_continual_node_restored_from_any_checkpoint_sends_identical_updates() -> None:
    """The node's open steps and protocol live in memory between messages (issue 25); a restore
    from a checkpoint before any message — the written steps, protocol and progress plus the
    messages since — sends the same updates as the Flink-free node fed the whole stream."""
    from privstream.operators.continual_logic import ContinualNode

    from tests.test_continual_logic import HOOKS, settings

    payloads = messages(SketchSpec("mg", 16), seed=9)
    node = ContinualNode(
        0, settings(universe=600, window=4, step_ms=250), None, {}, ShardProgress(), hooks=HOOKS
    )
    reference = [decode_update(u) for payload in payloads for u in node.add(payload)[0]]
    live = node_function()
    emitted: list[dict[str, Any]] = []
    checkpoints = {}
    for i, payload in enumerate(payloads):
        checkpoints[i] = (node_state(live), len(emitted))  # a checkpoint before message i
        emitted += node_updates(live, [payload])
    assert len(emitted) >= 15 and emitted == reference
    assert any(u["updates"] for u in reference)  # the protocol released something
    for i in (1, 30, 63, 64, 65, 100, 149):
        state, already = checkpoints[i]
        restored = node_function(copy.deepcopy(state))
        assert emitted[:already] + node_updates(restored, payloads[i:]) == reference, i


def test_a_continual_node_message_writes_no_step_until_a_flush() -> None:
    """Between flushes a message that closes no step writes neither its step's items nor the
    protocol: O(its events), not O(the open step)."""
    from privstream.operators.unflushed import FLUSH_EVERY

    f = node_function()
    writes: list[int] = []
    put = f.sketches.put
    f.sketches.put = lambda key, value: (writes.append(len(value)), put(key, value))  # type: ignore[method-assign]
    payloads = [WatermarkPayload("clock", 0)]  # message 1; then 200 of 50 events, all in one step
    payloads += [EventPayload(np.full(50, i, np.int64), np.full(50, 10, np.int64)) for i in range(200)]
    assert node_updates(f, payloads) == []
    flushes = len(payloads) // FLUSH_EVERY
    assert writes == [8 * 50 * (j * FLUSH_EVERY - 1) for j in range(1, flushes + 1)]  # the step, per flush
    assert f.protocol.value() is None  # no step closed: the protocol was never written
    assert len(f.since.state.get()) == len(payloads) % FLUSH_EVERY
