"""The sketch operator's live sketches (issue 25): O(events) per message, and a restore from any
checkpoint gives the same shard sketches, byte for byte, as a run without the failure.

The real operator body (:class:`~privstream.operators.sketch_operator.ShardSketchFunction`, a
:class:`~privstream.operators.shard_operator.ShardFunction`) runs on in-memory stand-ins of its Flink state (tests/test_several_bad_messages.py). A checkpoint is a deep
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
from privstream.operators.shard_operator import TypedEvent
from privstream.operators.sketch_operator import ShardSketchFunction
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
