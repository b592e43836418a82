"""The sliding-window job's operator keeps its DPSW sketch in memory (issue 25): a message that
changes the sketch appends itself to a ``ListState``, and the sketch's bytes are written only
after a message with an output (release, dead letter) or every ``FLUSH_EVERY`` messages. A restore
from any checkpoint emits exactly what a run without the failure emits.

The real operator body (:class:`~privstream.operators.window_operator.WindowShardFunction`) runs on
in-memory stand-ins of its Flink state (tests/test_several_bad_messages.py); a checkpoint is a deep
copy of that state and a restore is a fresh function on the copy, fed the messages after the
checkpoint, as Flink replays them from the checkpointed Kafka offsets. The reference is the shard
logic fed every message directly (whose releases and states equal the core sketch's:
tests/test_window_job_logic.py). Deterministic: the noise is keyed.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from privstream.connectors.avro_codec import decode
from privstream.operators.unflushed import FLUSH_EVERY, UnflushedMessages
from privstream.operators.window_logic import WindowSettings, WindowShardLogic
from privstream.operators.window_operator import STATES as STATES_TAG
from privstream.operators.window_operator import WindowShardFunction

from privstream.partitioning import partition_for
from tests.test_several_bad_messages import ContextStub, ListStateStub, ValueStateStub
from tests.test_window_job_logic import STATES, _event_settings, _message, _settings, _stream, _tick, _timed

Output = tuple[str, dict[str, Any]]


def _comparable(kind: str, data: bytes) -> Output:
    """An output without its wall-clock fields (``release_time``, ``created_time``, ``failed_time``)."""
    record = dict(decode(data)[1])
    for name in ("release_time", "created_time", "failed_time"):
        record.pop(name, None)
    return kind, record


def _count_messages(seed: int) -> list[bytes]:
    """Shard 0's messages of 1..3 items (over 64 messages per substream of W = 200 items), with a
    malformed message (a dead letter) among them."""
    rng = np.random.default_rng(seed)
    items = _stream(4000, seed)
    mine = items[partition_for(items, 2) == 0][:1500]
    out, at = [], 0
    while at < len(mine):
        n = int(rng.integers(1, 4))
        out.append(_message(mine[at : at + n]))
        at += n
        if len(out) == 150:
            out.append(b"not avro")
    return out


def _timed_messages(seed: int) -> list[bytes]:
    """Shard 0's events in messages of 1..2 events with rising times, a punctuation every 100 ms
    (W): more than 64 messages between punctuations."""
    rng = np.random.default_rng(seed)
    items = _stream(3000, seed)
    mine = items[partition_for(items, 2) == 0][:1200]
    times = np.sort(rng.integers(0, 1000, len(mine))).astype(np.int64)
    out: list[bytes] = []
    at, tick = 0, 100
    while at < len(mine):
        if times[at] >= tick:
            out.append(_tick(tick))
            tick += 100
            continue
        n = int(rng.integers(1, 3))
        end = min(len(mine), at + n, int(np.searchsorted(times, tick, side="left")))
        out.append(_timed(mine[at:end], times[at:end]))
        at = end
    out.append(_tick(tick))
    return out


def _function(settings: WindowSettings, state: dict[str, Any] | None = None) -> WindowShardFunction:
    """The operator on stub state (``state``: a checkpoint's copy), as ``open()`` leaves it."""
    f = WindowShardFunction(settings, "events", STATES)
    state = state or {
        "sketch": ValueStateStub(),
        "refused": ValueStateStub(),
        "binding": ValueStateStub(),
        "since": ListStateStub(),
    }
    f.sketch, f.refused, f.binding = state["sketch"], state["refused"], state["binding"]
    f.since = UnflushedMessages(state["since"])
    f._logic, f._sizes = {}, {}
    return f


def _state_of(f: WindowShardFunction) -> dict[str, Any]:
    return copy.deepcopy(
        {"sketch": f.sketch, "refused": f.refused, "binding": f.binding, "since": f.since.state}
    )


def _feed(f: WindowShardFunction, messages: list[bytes], first_offset: int = 0) -> list[Output]:
    out: list[Output] = []
    for offset, message in enumerate(messages, start=first_offset):
        for item in f.process_element((message, 0, offset), ContextStub()):
            if isinstance(item, tuple):
                tag, data = item
                out.append(_comparable("state" if tag is STATES_TAG else "dead-letter", data))
            else:
                out.append(_comparable("release", item))
    return out


CASES = {
    "count": (_settings(window=800, substream=200, checkpoints=(200, 8, 1)), _count_messages),
    "event-time": (_event_settings(), _timed_messages),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_restore_from_any_checkpoint_emits_what_an_unbroken_run_emits(case: str) -> None:
    settings, make = CASES[case]
    messages = make(seed=3)
    logic = WindowShardLogic(settings, 0, hooks=STATES)
    reference = [
        _comparable(kind, data)
        for o, m in enumerate(messages)
        for kind, data in logic.process(m, o, "events")
    ]
    assert sum(kind == "release" for kind, _ in reference) >= 4
    live = _function(settings)
    emitted: list[Output] = []
    checkpoints = {}
    for i, message in enumerate(messages):
        checkpoints[i] = (_state_of(live), len(emitted))  # a checkpoint before message i
        emitted += _feed(live, [message], i)
    assert emitted == reference  # the in-memory path alone
    lengths = [len(s[0]["since"].get()) for s in checkpoints.values()]
    assert max(lengths) == FLUSH_EVERY - 1  # a run of messages without output reached the bound
    for i in sorted({1, 63, 64, 65, 151, *(i for i, n in enumerate(lengths) if n == FLUSH_EVERY - 1)}):
        if i >= len(messages):
            continue
        state, already = checkpoints[i]
        restored = _function(settings, copy.deepcopy(state))
        assert emitted[:already] + _feed(restored, messages[i:], i) == reference, i


def test_a_message_without_output_writes_only_itself() -> None:
    """Between writes the sketch state is untouched: FLUSH_EVERY − 1 messages without output (at
    most 189 items, before the first release at item 200) append themselves and write nothing; the
    next one writes the sketch once and empties the list."""
    settings, _ = CASES["count"]
    messages = _count_messages(seed=3)[:FLUSH_EVERY]
    f = _function(settings)
    writes: list[int] = []
    update = f.sketch.update
    f.sketch.update = lambda value: (writes.append(len(value)), update(value))  # type: ignore[method-assign]
    assert _feed(f, messages[:-1]) == []
    assert (len(writes), len(f.since.state.get())) == (0, FLUSH_EVERY - 1)
    assert _feed(f, messages[-1:], FLUSH_EVERY - 1) == []
    assert (len(writes), len(f.since.state.get())) == (1, 0)
