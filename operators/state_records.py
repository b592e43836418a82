"""The operators' checkpointed state records in the core's versioned binary envelope.

The shard operator rewrites its :class:`~privstream.operators.epochs.ShardProgress` and the merge
operator its :class:`~privstream.operators.shard_logic.MergeState` on every message. They use the
envelope of :mod:`privstream.sketches.binary_format` (magic, format version, type byte, u64
parameters, payload, CRC-32) with type codes from its reserved ``STATE_CODES`` — not JSON or
pickle: corruption, truncation or a record of another type is refused with
:class:`~privstream.sketches.SketchFormatError`, and the bytes are the same on every Python.

Encoding of the pieces (little-endian): an optional int is a presence bit in a flags parameter plus
its two's-complement u64; a string is UTF-8; the merge state's per-shard columns and its pending
shard sketches are packed arrays (see :func:`pack_merge_payload`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from privstream.sketches.binary_format import STATE_CODES, SketchFormatError, decode_envelope, encode_envelope

SHARD_PROGRESS = STATE_CODES.start  #: type byte of a ShardProgress record
MERGE_STATE = STATE_CODES.start + 1  #: type byte of a MergeState record
SHARD_SKETCHES = STATE_CODES.start + 2  #: type byte of an epoch's per-shard sketches (per-shard release)

_MASK = (1 << 64) - 1
_ENTRY = struct.Struct("<qIQ")  # epoch, shard, sketch length


def optional_ints(values: Sequence[int | None]) -> list[int]:
    """``[flags, v0, v1, …]``: bit i of flags says value i is present; values as u64."""
    flags = sum(1 << i for i, v in enumerate(values) if v is not None)
    return [flags, *((0 if v is None else v & _MASK) for v in values)]


def from_optional_ints(params: Sequence[int], count: int) -> list[int | None]:
    flags, raw = params[0], params[1 : 1 + count]
    if flags >> count:
        raise SketchFormatError(f"bad presence flags {flags:#x} for {count} values")
    return [(v - (1 << 64) if v >> 63 else v) if flags >> i & 1 else None for i, v in enumerate(raw)]


def pack_merge_payload(
    closed: Sequence[int | None], starts: Sequence[int | None], pending: dict[int, dict[int, bytes]]
) -> bytes:
    """Per-shard ``closed`` and ``starts`` columns (flags + values each), then every pending shard
    sketch as ``(epoch i64, shard u32, length u64, bytes)`` in (epoch, shard) order."""
    columns = [*optional_ints(closed), *optional_ints(starts)]
    out = [struct.pack(f"<{len(columns)}Q", *columns)]
    for epoch in sorted(pending):
        for shard in sorted(pending[epoch]):
            data = pending[epoch][shard]
            out.append(_ENTRY.pack(epoch, shard, len(data)))
            out.append(bytes(data))
    return b"".join(out)


def unpack_merge_payload(
    payload: bytes, shards: int, entries: int
) -> tuple[list[int | None], list[int | None], dict[int, dict[int, bytes]], bytes]:
    """Inverse of :func:`pack_merge_payload`; also returns the bytes after the entries."""
    width = 2 * (shards + 1)
    if len(payload) < 8 * width:
        raise SketchFormatError("truncated merge state columns")
    columns = struct.unpack_from(f"<{width}Q", payload)
    closed = from_optional_ints(columns[: shards + 1], shards)
    starts = from_optional_ints(columns[shards + 1 :], shards)
    at, pending = 8 * width, {}  # type: ignore[var-annotated]
    for _ in range(entries):
        if len(payload) < at + _ENTRY.size:
            raise SketchFormatError("truncated merge state entry")
        epoch, shard, length = _ENTRY.unpack_from(payload, at)
        at += _ENTRY.size
        if len(payload) < at + length or shard >= shards:
            raise SketchFormatError("truncated or out-of-range merge state entry")
        pending.setdefault(epoch, {})[shard] = payload[at : at + length]
        at += length
    return closed, starts, pending, payload[at:]


def pack_shard_sketches(sketches: Sequence[bytes]) -> bytes:
    """One epoch's shard sketches in shard order (the per-shard release's input): an envelope with
    the count as its parameter and ``(length u64, bytes)`` per shard."""
    payload = b"".join(struct.pack("<Q", len(data)) + bytes(data) for data in sketches)
    return encode_envelope(SHARD_SKETCHES, [len(sketches)], payload)


def unpack_shard_sketches(data: bytes) -> list[bytes]:
    """Inverse of :func:`pack_shard_sketches` (SketchFormatError on anything else)."""
    (count,), payload = decode_envelope(data, SHARD_SKETCHES, 1, "shard sketches")
    out, at = [], 0
    for _ in range(count):
        if len(payload) < at + 8:
            raise SketchFormatError("truncated shard sketches record")
        (length,) = struct.unpack_from("<Q", payload, at)
        at += 8
        if len(payload) < at + length:
            raise SketchFormatError("truncated shard sketch")
        out.append(payload[at : at + length])
        at += length
    if at != len(payload) or not out:
        raise SketchFormatError("bad shard sketches record")
    return out
