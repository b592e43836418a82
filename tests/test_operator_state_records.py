"""The operators' checkpointed state in the core's binary envelope: exact round trips (including
the refusal reason, negative and missing values, pending sketches) and refusal of corrupt bytes."""

from __future__ import annotations

import pytest
from privstream.operators.epochs import FINAL, ShardProgress
from privstream.operators.shard_logic import MergeState

from privstream.sketches import MisraGries, SketchFormatError

PROGRESS = [
    ShardProgress(),
    ShardProgress(12, 5_000, 0, -1),
    ShardProgress(2**40, -7, None, FINAL, "partition 1: misrouted: 3 of 5 event(s) … é"),
]
SKETCH = MisraGries(4).to_bytes()
STATES = [
    MergeState((None,), {}, None, (None,)),
    MergeState((3, None, FINAL), {4: {0: SKETCH, 2: b""}, 5: {1: SKETCH}}, 4, (0, None, 2), None),
    MergeState((-1, 0), {}, 0, (0, 0), "partition 0: misrouted"),
]


@pytest.mark.parametrize("progress", PROGRESS)
def test_shard_progress_round_trips_exactly(progress: ShardProgress) -> None:
    data = progress.to_bytes()
    assert data[:4] == b"PSSK" and data[6] == 200
    assert ShardProgress.from_bytes(data) == progress
    assert ShardProgress.from_bytes(None) == ShardProgress()


@pytest.mark.parametrize("state", STATES)
def test_merge_state_round_trips_exactly(state: MergeState) -> None:
    data = state.to_bytes()
    assert data[6] == 201
    assert MergeState.from_bytes(data) == state


@pytest.mark.parametrize("data", [PROGRESS[2].to_bytes(), STATES[1].to_bytes()])
def test_corrupt_truncated_or_foreign_records_are_refused(data: bytes) -> None:
    decoders = (ShardProgress.from_bytes, MergeState.from_bytes)
    for decode in decoders:
        for cut in (5, len(data) // 2, len(data) - 1):
            with pytest.raises(SketchFormatError):
                decode(data[:cut])
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x40
        with pytest.raises(SketchFormatError):
            decode(bytes(flipped))
    foreign = MergeState if data[6] == 200 else ShardProgress
    with pytest.raises(SketchFormatError, match="wrong sketch type"):
        foreign.from_bytes(data)
