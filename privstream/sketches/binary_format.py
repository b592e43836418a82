"""Versioned binary format shared by every privstream sketch.

Envelope (all integers little-endian)::

    offset  size  field
    0       4     magic b"PSSK"
    4       2     format version, u16 (currently 1)
    6       1     sketch type, u8 (see SketchType)
    7       1     reserved, must be 0
    8       2     P = number of parameters, u16
    10      8*P   parameters, u64 each (meaning fixed per sketch type, e.g. k, n, build code)
    10+8P   8     L = payload length in bytes, u64
    18+8P   L     payload (per sketch type)
    18+8P+L 4     CRC-32 (zlib) of every preceding byte, u32

Counter payload (MG, standard MG, PAMG, reduced sketch), keys in the universe's total order::

    u32 a, then a int64 keys, then a int64 counts            # int items
    u32 b, then b u32 UTF-8 byte lengths, the concatenated UTF-8 bytes ("surrogatepass"),
           then b int64 counts                                # str items
    u32 c, then c u32 dummy indices, then c int64 counts     # Dummy keys (Alg. 1 slots only)

Count-Min payload: depth*width int64 counters, row-major.

:func:`decode` rejects wrong magic, unsupported version, wrong sketch type, wrong parameter
count, truncation, trailing bytes and checksum mismatches with :class:`SketchFormatError`
(a ValueError); each sketch then validates its own invariants.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from privstream.sketches.build import Build
from privstream.sketches.order import Dummy, Key, item_order_key

MAGIC = b"PSSK"
FORMAT_VERSION = 1
_HEAD = struct.Struct("<4sHBBH")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


class SketchFormatError(ValueError):
    """Serialised sketch bytes are corrupt, truncated, of another type or another version."""


class SketchType(enum.IntEnum):
    MISRA_GRIES = 1
    STANDARD_MISRA_GRIES = 2
    PAMG = 3
    REDUCED = 4
    COUNT_MIN = 5


_LOADERS: dict[int, Callable[[bytes], Any]] = {}


def register(sketch_type: SketchType) -> Callable[[type], type]:
    """Class decorator: ``cls.from_bytes`` becomes the loader for ``sketch_type``."""

    def deco(cls: type) -> type:
        _LOADERS[int(sketch_type)] = cls.from_bytes  # type: ignore[attr-defined]
        return cls

    return deco


def load_sketch(data: bytes) -> Any:
    """Decode any privstream sketch, dispatching on the type byte."""
    if len(data) < _HEAD.size or bytes(data[:4]) != MAGIC:
        raise SketchFormatError("not a privstream sketch (bad magic or too short)")
    loader = _LOADERS.get(data[6])
    if loader is None:
        raise SketchFormatError(f"unknown sketch type {data[6]}")
    return loader(data)


def encode(sketch_type: SketchType, params: Sequence[int], payload: bytes) -> bytes:
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, int(sketch_type), 0, len(params))
    body = b"".join([head, struct.pack(f"<{len(params)}Q", *params), _U64.pack(len(payload)), payload])
    return body + _U32.pack(zlib.crc32(body))


def decode(data: bytes, expected: SketchType, n_params: int) -> tuple[tuple[int, ...], bytes]:
    """Check the envelope and return (params, payload)."""
    data = bytes(data)
    if len(data) < _HEAD.size:
        raise SketchFormatError(f"truncated: {len(data)} bytes is shorter than the header")
    magic, version, stype, reserved, n = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise SketchFormatError("bad magic: not a privstream sketch")
    if version != FORMAT_VERSION:
        raise SketchFormatError(f"unsupported format version {version} (this build reads {FORMAT_VERSION})")
    if stype != int(expected):
        try:
            name = SketchType(stype).name
        except ValueError:
            name = str(stype)
        raise SketchFormatError(f"wrong sketch type: expected {expected.name}, got {name}")
    if reserved != 0 or n != n_params:
        raise SketchFormatError(f"bad header: {n} parameters (expected {n_params}), reserved={reserved}")
    at = _HEAD.size + 8 * n
    if len(data) < at + 8:
        raise SketchFormatError("truncated header")
    params = struct.unpack_from(f"<{n}Q", data, _HEAD.size)
    (length,) = _U64.unpack_from(data, at)
    end = at + 8 + length
    if len(data) < end + 4:
        raise SketchFormatError(f"truncated: need {end + 4} bytes, got {len(data)}")
    if len(data) > end + 4:
        raise SketchFormatError(f"{len(data) - end - 4} trailing bytes after the checksum")
    if zlib.crc32(data[:end]) != _U32.unpack_from(data, end)[0]:
        raise SketchFormatError("checksum mismatch: bytes are corrupt")
    return params, data[at + 8 : end]


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.at = buf, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.buf):
            raise SketchFormatError("payload truncated")
        out = self.buf[self.at : self.at + n]
        self.at += n
        return out

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def array(self, dtype: str, count: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize
        return np.frombuffer(self.take(size * count), dtype=dtype).copy()

    def done(self) -> None:
        if self.at != len(self.buf):
            raise SketchFormatError("trailing bytes in payload")


def encode_counters(counters: Mapping[Key, int]) -> bytes:
    """Counter payload for a mapping of int / str / Dummy keys to int64 counts."""
    keys = sorted(counters, key=item_order_key)
    ints = [x for x in keys if type(x) is int]
    strs = [x.encode("utf-8", "surrogatepass") for x in keys if type(x) is str]
    dummies = [x for x in keys if type(x) is Dummy]
    parts = [
        _U32.pack(len(ints)),
        np.array(ints, dtype="<i8").tobytes(),
        np.array([counters[x] for x in ints], dtype="<i8").tobytes(),
        _U32.pack(len(strs)),
        np.array([len(s) for s in strs], dtype="<u4").tobytes(),
        *strs,
        np.array([counters[x] for x in keys if type(x) is str], dtype="<i8").tobytes(),
        _U32.pack(len(dummies)),
        np.array([d.index for d in dummies], dtype="<u4").tobytes(),
        np.array([counters[x] for x in dummies], dtype="<i8").tobytes(),
    ]
    return b"".join(parts)


def decode_counters(payload: bytes) -> dict[Key, int]:
    """Inverse of :func:`encode_counters`; rejects truncation, bad UTF-8 and duplicate keys."""
    r = _Reader(payload)
    a = r.u32()
    out: dict[Key, int] = dict(zip(r.array("<i8", a).tolist(), r.array("<i8", a).tolist(), strict=True))
    b = r.u32()
    lengths = r.array("<u4", b).tolist()
    try:
        strs = [r.take(n).decode("utf-8", "surrogatepass") for n in lengths]
    except UnicodeDecodeError as exc:
        raise SketchFormatError(f"invalid UTF-8 in a str key: {exc}") from None
    out.update(zip(strs, r.array("<i8", b).tolist(), strict=True))
    c = r.u32()
    out.update(zip(map(Dummy, r.array("<u4", c).tolist()), r.array("<i8", c).tolist(), strict=True))
    r.done()
    if len(out) != a + b + c:
        raise SketchFormatError("duplicate keys in counter payload")
    return out


def decode_array(payload: bytes, dtype: str, count: int) -> np.ndarray:
    r = _Reader(payload)
    arr = r.array(dtype, count)
    r.done()
    return arr


def decode_build(code: int) -> Build:
    try:
        return Build.from_code(code)
    except ValueError as exc:
        raise SketchFormatError(str(exc)) from None


def require(condition: bool, message: str) -> None:
    """Raise SketchFormatError(message) unless ``condition`` (decoded-invariant checks)."""
    if not condition:
        raise SketchFormatError(message)
