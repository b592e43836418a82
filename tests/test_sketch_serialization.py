"""Binary format: round trips for every sketch and rejection of corrupt, truncated, mismatched or
semantically invalid bytes."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privstream.sketches import (
    Build,
    CountMinSketch,
    Dummy,
    MisraGries,
    PrivacyAwareMisraGries,
    ReducedSketch,
    SketchFormatError,
    StandardMisraGries,
    load_sketch,
    merge_in_order,
    reduce_sensitivity,
)
from privstream.sketches.binary_format import encode, encode_counters

items = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=6))


def alg1(k: int, stream) -> MisraGries:
    sketch = MisraGries(k)
    for x in stream:
        sketch.update(x)
    return sketch


def state(sketch) -> tuple:
    """Everything observable about a sketch."""
    if isinstance(sketch, CountMinSketch):
        return (sketch.width, sketch.depth, sketch.seed, sketch.n, sketch.table.tolist())
    if isinstance(sketch, ReducedSketch):
        return (sketch.k, sketch.n, dict(sketch.numerators), sketch.source_build, sketch.partitions)
    out = (type(sketch), sketch.k, sketch.n, sketch.build, sketch.counters())
    if isinstance(sketch, MisraGries):
        out += (sketch.decrements,)
        if sketch.build is Build.ALG1_SEQUENTIAL:
            out += (sketch.slots(),)
    if isinstance(sketch, PrivacyAwareMisraGries):
        out += (sketch.m, sketch.n_users)
    return out


def examples() -> dict[str, object]:
    stream = [1, "a", 2, 1, "ü", -5, 1, 2, 3, 3, 3, "\ud800"]
    merged_alg1 = alg1(3, stream)
    merged_alg1.update_batch(np.array([7, 7, 1]))
    std = StandardMisraGries(4)
    for x in stream:
        std.update(x)
    pamg = PrivacyAwareMisraGries(4, 2)
    pamg.update([1, "a"])
    pamg.update([2])
    pamg_merged = PrivacyAwareMisraGries(4, 2)
    pamg_merged.update_batch([[1, 2], ["b"]])
    cms = CountMinSketch(16, 3, 2**64 - 1)
    cms.update_batch(stream)
    return {
        "alg1": alg1(3, stream),
        "alg1_fresh": MisraGries(5),
        "alg1_merged": merged_alg1,
        "standard": std,
        "merged": merge_in_order([std, alg1(4, stream)]),
        "pamg": pamg,
        "pamg_merged": pamg_merged,
        "reduced": reduce_sensitivity(alg1(3, stream)),
        "cms": cms,
    }


EXAMPLES = examples()


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_round_trip_and_load_sketch(name: str) -> None:
    sketch = EXAMPLES[name]
    data = sketch.to_bytes()  # type: ignore[attr-defined]
    again = type(sketch).from_bytes(data)  # type: ignore[attr-defined]
    assert state(again) == state(sketch)
    assert again.to_bytes() == data  # canonical encoding
    assert state(load_sketch(data)) == state(sketch)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_single_byte_corruption_and_truncation_is_rejected(name: str) -> None:
    data = EXAMPLES[name].to_bytes()  # type: ignore[attr-defined]
    cls = type(EXAMPLES[name])
    for i in range(len(data)):
        corrupt = bytearray(data)
        corrupt[i] ^= 0x5A
        with pytest.raises(SketchFormatError):
            cls.from_bytes(bytes(corrupt))
    for cut in range(len(data)):
        with pytest.raises(SketchFormatError):
            cls.from_bytes(data[:cut])
    with pytest.raises(SketchFormatError, match="trailing"):
        cls.from_bytes(data + b"\x00")


def test_wrong_type_wrong_version_and_bad_magic() -> None:
    mg = EXAMPLES["alg1"].to_bytes()  # type: ignore[attr-defined]
    with pytest.raises(SketchFormatError, match="wrong sketch type"):
        CountMinSketch.from_bytes(mg)
    with pytest.raises(SketchFormatError, match="wrong sketch type"):
        StandardMisraGries.from_bytes(mg)
    body = bytearray(mg[:-4])
    body[4:6] = struct.pack("<H", 2)
    future = bytes(body) + struct.pack("<I", zlib.crc32(body))
    with pytest.raises(SketchFormatError, match="version"):
        MisraGries.from_bytes(future)
    with pytest.raises(SketchFormatError, match="magic"):
        load_sketch(b"XXXX" + mg[4:])
    with pytest.raises(SketchFormatError):
        load_sketch(b"")
    assert issubclass(SketchFormatError, ValueError)


@pytest.mark.parametrize(
    ("sketch_type", "params", "counters", "message"),
    [
        (StandardMisraGries, [2, 10, Build.MERGED.code], {1: 1, 2: 1, 3: 1}, "k counters"),
        (StandardMisraGries, [2, 1, Build.MERGED.code], {1: 5}, "sum"),
        (StandardMisraGries, [2, 10, Build.ALG1_SEQUENTIAL.code], {1: 1}, "build"),
        (StandardMisraGries, [2, 10, 99], {1: 1}, "build"),
        (StandardMisraGries, [2, 10, Build.MERGED.code], {1: 0}, "zero"),
        (MisraGries, [3, 10, Build.ALG1_SEQUENTIAL.code, 0], {1: 1}, "exactly k slots"),
        (MisraGries, [2, 4, Build.ALG1_SEQUENTIAL.code, 0], {1: 1, Dummy(1): 0}, "sum identity"),
        (MisraGries, [2, 1, Build.ALG1_SEQUENTIAL.code, 0], {1: 1, Dummy(5): 0}, "suffix"),
        # unreachable Alg. 1 states: dummies are used in order, never counted, and none is left
        # once a decrement happened (so no real key is at 0 beside a dummy)
        (MisraGries, [3, 2, Build.ALG1_SEQUENTIAL.code, 0], {1: 1, 2: 1, Dummy(0): 0}, "suffix"),
        (
            MisraGries,
            [2, 2, Build.ALG1_SEQUENTIAL.code, 0],
            {1: 1, Dummy(1): 1},
            "exactly the dummies",
        ),
        (
            MisraGries,
            [3, 1, Build.ALG1_SEQUENTIAL.code, 0],
            {1: 1, 2: 0, Dummy(2): 0},
            "exactly the",
        ),
        (
            MisraGries,
            [2, 4, Build.ALG1_SEQUENTIAL.code, 1],
            {1: 1, Dummy(1): 0},
            "never decremented",
        ),
        (PrivacyAwareMisraGries, [3, 10, Build.PAMG.code, 3, 5], {1: 1}, "m < k"),
        (PrivacyAwareMisraGries, [3, 10, Build.PAMG.code, 1, 5], {1: 1}, "m \\* users"),
        (ReducedSketch, [3, 10, Build.MERGED.code, 1], {1: 1}, "cannot be reduced"),
    ],
)
def test_semantically_invalid_payload_with_valid_checksum(sketch_type, params, counters, message) -> None:
    data = encode(sketch_type, params, encode_counters(counters))
    with pytest.raises(SketchFormatError, match=message):
        load_sketch(data)


def test_cms_rows_must_sum_to_n() -> None:
    table = np.zeros((2, 4), dtype="<i8")
    table[0, 1] = 3
    with pytest.raises(SketchFormatError, match="sum to n"):
        CountMinSketch.from_bytes(encode(CountMinSketch, [4, 2, 0, 3], table.tobytes()))


@settings(max_examples=60, deadline=None)
@given(stream=st.lists(items, max_size=30), more=st.lists(items, max_size=10), k=st.integers(1, 4))
def test_alg1_round_trip_then_continue_is_identical(stream, more, k) -> None:
    """Decoding rebuilds the zero-key heap: continuing after a round trip changes nothing."""
    original = alg1(k, stream)
    copy = MisraGries.from_bytes(original.to_bytes())
    for x in more:
        original.update(x)
        copy.update(x)
    assert state(copy) == state(original)
