"""The operators' checkpointed state in the core's binary envelope: exact round trips (including
the refusal reason, negative and missing values, pending sketches) and refusal of corrupt bytes;
likewise the per-shard release input (an epoch's shard sketches in shard order)."""

from __future__ import annotations

import struct

import pytest
from privstream.operators.epochs import FINAL, ShardProgress
from privstream.operators.shard_logic import MergeState
from privstream.operators.state_records import SHARD_SKETCHES, pack_shard_sketches, unpack_shard_sketches

from privstream.sketches import MisraGries, SketchFormatError
from privstream.sketches.binary_format import encode_envelope

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


# ------------------------------------------------------------------ per-shard release input

_FULL = MisraGries(4)
_FULL.update_batch([1, 1, 2, 3, 4, 5, 5])
SHARD_SETS = [
    [SKETCH],
    [SKETCH, _FULL.to_bytes(), SKETCH],
    [b"", _FULL.to_bytes(), bytes(range(256)) * 3],  # opaque bytes, empty ones included
]


@pytest.mark.parametrize("sketches", SHARD_SETS)
def test_shard_sketches_round_trip_exactly_in_shard_order(sketches: list[bytes]) -> None:
    data = pack_shard_sketches(sketches)
    assert data[:4] == b"PSSK" and data[6] == SHARD_SKETCHES == 202
    assert unpack_shard_sketches(data) == sketches
    assert unpack_shard_sketches(pack_shard_sketches(sketches[::-1])) == sketches[::-1]
    assert pack_shard_sketches([bytearray(b) for b in sketches]) == data  # any bytes-like input


def test_corrupt_truncated_empty_or_foreign_shard_sketches_are_refused() -> None:
    data = pack_shard_sketches(SHARD_SETS[1])
    for cut in (5, len(data) // 2, len(data) - 1):
        with pytest.raises(SketchFormatError):
            unpack_shard_sketches(data[:cut])
    for at in (len(data) // 2, 24, len(data) - 2):
        flipped = bytearray(data)
        flipped[at] ^= 0x40
        with pytest.raises(SketchFormatError):
            unpack_shard_sketches(bytes(flipped))
    for foreign in (SKETCH, STATES[1].to_bytes(), PROGRESS[1].to_bytes()):
        with pytest.raises(SketchFormatError, match="wrong sketch type"):
            unpack_shard_sketches(foreign)
    with pytest.raises(SketchFormatError, match="wrong sketch type"):
        MergeState.from_bytes(data)
    with pytest.raises(SketchFormatError):
        unpack_shard_sketches(pack_shard_sketches([]))  # an epoch always has at least one shard


def test_inconsistent_shard_sketch_records_are_refused_even_with_a_valid_checksum() -> None:
    """Well-formed envelopes (valid CRC) whose payload disagrees with its count: fewer sketches than
    declared, trailing bytes after the last one, or a length running past the end."""
    two = b"".join(struct.pack("<Q", len(b)) + b for b in (SKETCH, SKETCH))
    for count, payload in (
        (3, two),  # declares 3, holds 2
        (1, two),  # declares 1, holds 2 (trailing bytes)
        (1, struct.pack("<Q", 1000) + SKETCH),  # length past the end
        (1, b"\x01\x02"),  # not even a length
    ):
        with pytest.raises(SketchFormatError):
            unpack_shard_sketches(encode_envelope(SHARD_SKETCHES, [count], payload))
    assert unpack_shard_sketches(encode_envelope(SHARD_SKETCHES, [2], two)) == [SKETCH, SKETCH]
