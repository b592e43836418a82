"""Versioned binary format shared by every privstream sketch.

Envelope (all integers little-endian)::

    offset  size  field
    0       4     magic b"PSSK"
    4       2     format version, u16 (currently 1)
    6       1     sketch type code, u8 (declared by each sketch class with @register_sketch)
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

The dict path (:func:`encode_counters` / :func:`decode_counters`) and the array path
(:func:`encode_counter_parts` / :func:`decode_counter_parts`, used by sketches whose counters live
in numpy arrays) write and accept exactly the same bytes: each part is sorted on encoding, and
decoding accepts any order within a part but rejects duplicate keys.

Count-Min payload: depth*width int64 counters, row-major.

:func:`decode` rejects wrong magic, unsupported version, wrong sketch type, wrong parameter
count, truncation, trailing bytes and checksum mismatches with :class:`SketchFormatError`
(a ValueError); each sketch then validates its own invariants.

**Registration.** A sketch module declares its stable type code once, on the class::

    @register_sketch(5)
    class CountMinSketch(Sketch): ...

and :func:`load_sketch` dispatches through that registry; nothing here lists the sketches
(:func:`registered_sketches` is the table; ``tests/test_sketch_protocol.py`` pins the codes in use).
A code is part of the wire format: never change or reuse one; a new sketch takes a free code in
1..199 (200..255 are the operators' state records).
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from privstream.sketches.build import Build
from privstream.sketches.order import Dummy, Item, Key
from privstream.validation import check_int

MAGIC = b"PSSK"
FORMAT_VERSION = 1
_HEAD = struct.Struct("<4sHBBH")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


class SketchFormatError(ValueError):
    """Serialised sketch bytes are corrupt, truncated, of another type or another version."""


_REGISTRY: dict[int, type] = {}
#: Type codes reserved for the streaming operators' checkpointed state records (shard progress,
#: merge state), which share this envelope but are not sketches: never registered as sketches.
STATE_CODES = range(200, 256)
_T = TypeVar("_T", bound=type)


def register_sketch(code: int) -> Callable[[_T], _T]:
    """Class decorator: ``code`` (1..199) is the stable type byte of ``cls`` in the binary format.

    Sets ``cls.type_code`` and makes :func:`load_sketch` decode that byte with ``cls.from_bytes``.
    A code is registered once: a second class for the same code, or a second code for one class,
    is a ValueError (two sketches sharing a byte would decode each other's bytes)."""
    code = check_int("sketch type code", code, below=STATE_CODES.start, type_error=ValueError)

    def deco(cls: _T) -> _T:
        if not callable(getattr(cls, "from_bytes", None)) or not callable(getattr(cls, "to_bytes", None)):
            raise TypeError(f"{cls.__name__} needs to_bytes and a from_bytes classmethod to be registered")
        holder = _REGISTRY.get(code)
        if holder is not None and _qualified(holder) != _qualified(cls):
            raise ValueError(f"sketch type code {code} is already registered to {_qualified(holder)}")
        if _qualified(cls) in {_qualified(c) for k, c in _REGISTRY.items() if k != code}:
            raise ValueError(f"{_qualified(cls)} is already registered under another code")
        _REGISTRY[code] = cls  # re-registering the same class (a module reload) replaces it
        cls.type_code = code  # type: ignore[attr-defined]
        return cls

    return deco


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def type_code(cls: type) -> int:
    """The registered type code of exactly ``cls`` (TypeError for an unregistered class, also for
    a subclass of a registered one: it must register its own code, or its bytes would decode as
    the parent class)."""
    code = getattr(cls, "type_code", None)
    if code is None or _REGISTRY.get(code) is not cls:
        raise TypeError(f"{cls.__name__} is not a registered sketch: decorate it with @register_sketch(code)")
    return code


def registered_sketches() -> dict[int, type]:
    """The registry: type code -> sketch class, by code."""
    return dict(sorted(_REGISTRY.items()))


def _type_name(code: int) -> str:
    cls = _REGISTRY.get(code)
    return cls.__name__ if cls is not None else f"unknown type {code}"


def load_sketch(data: bytes) -> Any:
    """Decode any registered sketch, dispatching on the type byte."""
    if len(data) < _HEAD.size or bytes(data[:4]) != MAGIC:
        raise SketchFormatError("not a privstream sketch (bad magic or too short)")
    cls = _REGISTRY.get(data[6])
    if cls is None:
        raise SketchFormatError(f"unknown sketch type {data[6]}")
    return cls.from_bytes(data)  # type: ignore[attr-defined]


def encode(cls: type, params: Sequence[int], payload: bytes) -> bytes:
    """The envelope of a ``cls`` sketch (its registered type code) around ``params`` and ``payload``."""
    return encode_envelope(type_code(cls), params, payload)


def encode_envelope(code: int, params: Sequence[int], payload: bytes) -> bytes:
    """The envelope with type byte ``code`` around ``params`` (u64 each) and ``payload``: for sketches
    via :func:`encode`, and for the operators' state records (codes in :data:`STATE_CODES`)."""
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, code, 0, len(params))
    body = b"".join([head, struct.pack(f"<{len(params)}Q", *params), _U64.pack(len(payload)), payload])
    return body + _U32.pack(zlib.crc32(body))


def decode(data: bytes, cls: type, n_params: int) -> tuple[tuple[int, ...], bytes]:
    """Check the envelope of bytes that should hold a ``cls`` sketch; return (params, payload)."""
    return decode_envelope(data, type_code(cls), n_params, cls.__name__)


def decode_envelope(data: bytes, expected: int, n_params: int, what: str) -> tuple[tuple[int, ...], bytes]:
    """Check the envelope of bytes that should hold type ``expected`` (named ``what`` in errors)."""
    data = bytes(data)
    if len(data) < _HEAD.size:
        raise SketchFormatError(f"truncated: {len(data)} bytes is shorter than the header")
    magic, version, stype, reserved, n = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise SketchFormatError("bad magic: not a privstream sketch")
    if version != FORMAT_VERSION:
        raise SketchFormatError(f"unsupported format version {version} (this build reads {FORMAT_VERSION})")
    if stype != expected:
        raise SketchFormatError(f"wrong sketch type: expected {what}, got {_type_name(stype)}")
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


_EMPTY_I64 = np.zeros(0, dtype=np.int64)
_EMPTY_I64.setflags(write=False)


class CounterParts:
    """A decoded counter payload as arrays, one part per key type, in payload order.

    ``int_keys``/``int_counts`` and ``dummy_index``/``dummy_counts`` are int64 arrays (owned: a
    sketch may keep and mutate them), ``str_keys`` a list with ``str_counts`` an int64 array. The
    vectorised restore of an int-keyed sketch (Lebeda–Tětek Alg. 1 slots as arrays, or a merged
    summary) reads these directly; :meth:`to_dict` is :func:`decode_counters`' dict."""

    __slots__ = ("dummy_counts", "dummy_index", "int_counts", "int_keys", "str_counts", "str_keys")

    def __init__(
        self,
        int_keys: np.ndarray,
        int_counts: np.ndarray,
        str_keys: list[str],
        str_counts: np.ndarray,
        dummy_index: np.ndarray,
        dummy_counts: np.ndarray,
    ) -> None:
        self.int_keys, self.int_counts = int_keys, int_counts
        self.str_keys, self.str_counts = str_keys, str_counts
        self.dummy_index, self.dummy_counts = dummy_index, dummy_counts

    def __len__(self) -> int:
        return len(self.int_keys) + len(self.str_keys) + len(self.dummy_index)

    def all_counts(self) -> np.ndarray:
        """Every count (ints, strs, dummies) as one int64 array."""
        return np.concatenate([self.int_counts, self.str_counts, self.dummy_counts])

    def to_dict(self) -> dict[Key, int]:
        """The keys as ``int`` / ``str`` / :class:`Dummy` mapped to their counts (payload order)."""
        out: dict[Key, int] = dict(zip(self.int_keys.tolist(), self.int_counts.tolist(), strict=True))
        out.update(zip(self.str_keys, self.str_counts.tolist(), strict=True))
        out.update(zip(dummy_keys(self.dummy_index.tolist()), self.dummy_counts.tolist(), strict=True))
        return out


def exact_sum(counts: np.ndarray) -> int:
    """``sum(counts)`` as an exact Python int (int64 accumulation only where it cannot overflow)."""
    if len(counts) == 0:
        return 0
    top = max(abs(int(counts.max())), abs(int(counts.min())))
    if top * len(counts) < 2**63:
        return int(counts.sum())
    return sum(counts.tolist())


def has_duplicates(values: np.ndarray) -> bool:
    """Whether the 1-d array ``values`` repeats a value (no sort if it is strictly increasing)."""
    if len(values) < 2 or bool(np.all(values[1:] > values[:-1])):
        return False
    return len(np.unique(values)) != len(values)


_DUMMY_CACHE: list[Dummy] = []
_DUMMY_CACHE_MAX = 1 << 22
_DUMMY_LOCK = threading.Lock()


def dummy_keys(indices: list[int]) -> list[Dummy]:
    """``[Dummy(i) for i in indices]``, sharing the (immutable) objects for indices below 2^22.

    Building k frozen dataclass instances costs ~0.5 µs each (35 ms at k = 65536); slots() and the
    dict view of an Alg. 1 sketch need one per remaining dummy, so they are made once per process."""
    if not indices:
        return []
    top = max(indices) + 1
    if top > _DUMMY_CACHE_MAX:
        return list(map(Dummy, indices))
    cache = _DUMMY_CACHE
    if len(cache) < top:
        with _DUMMY_LOCK:
            if len(cache) < top:
                cache.extend(map(Dummy, range(len(cache), top)))
    return [cache[i] for i in indices]


def _by_key(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``keys`` and ``counts`` sorted by key (keys unique; no sort if already increasing)."""
    if len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1])):
        return keys, counts
    order = np.argsort(keys, kind="stable")
    return keys[order], counts[order]


def encode_counter_parts(
    int_keys: np.ndarray,
    int_counts: np.ndarray,
    str_pairs: Iterable[tuple[str, int]],
    dummy_index: np.ndarray,
    dummy_counts: np.ndarray,
) -> bytes:
    """The counter payload of unique int keys, str keys and dummy indices with their counts (each
    part in any order: it is sorted here, so the bytes equal :func:`encode_counters`' for the same
    keys)."""
    int_keys, int_counts = _by_key(np.asarray(int_keys, dtype=np.int64), np.asarray(int_counts))
    dummy_index, dummy_counts = _by_key(np.asarray(dummy_index, dtype=np.int64), np.asarray(dummy_counts))
    strs = [(x.encode("utf-8", "surrogatepass"), c) for x, c in sorted(str_pairs)]
    parts = [
        _U32.pack(len(int_keys)),
        int_keys.astype("<i8", copy=False).tobytes(),
        int_counts.astype("<i8", copy=False).tobytes(),
        _U32.pack(len(strs)),
        np.array([len(s) for s, _ in strs], dtype="<u4").tobytes(),
        *(s for s, _ in strs),
        np.array([c for _, c in strs], dtype="<i8").tobytes(),
        _U32.pack(len(dummy_index)),
        dummy_index.astype("<u4").tobytes(),
        dummy_counts.astype("<i8", copy=False).tobytes(),
    ]
    return b"".join(parts)


def encode_counters(counters: Mapping[Key, int] | Mapping[Item, int]) -> bytes:
    """Counter payload for a mapping of int / str / Dummy keys to int64 counts (keys of any other
    type are left out); an all-int mapping is converted with ``np.fromiter``."""
    if set(map(type, counters)) <= {int}:
        size = len(counters)
        keys = np.fromiter(counters.keys(), dtype=np.int64, count=size)
        counts = np.fromiter(counters.values(), dtype=np.int64, count=size)
        return encode_counter_parts(keys, counts, (), _EMPTY_I64, _EMPTY_I64)
    ints = [(x, c) for x, c in counters.items() if type(x) is int]
    strs = [(x, c) for x, c in counters.items() if type(x) is str]
    dummies = [(x.index, c) for x, c in counters.items() if type(x) is Dummy]
    return encode_counter_parts(
        np.array([x for x, _ in ints], dtype=np.int64),
        np.array([c for _, c in ints], dtype=np.int64),
        strs,
        np.array([i for i, _ in dummies], dtype=np.int64),
        np.array([c for _, c in dummies], dtype=np.int64),
    )


def decode_counter_parts(payload: bytes) -> CounterParts:
    """The counter payload as arrays; rejects truncation, trailing bytes, bad UTF-8 and duplicate
    keys (within a key type: int 3, "3" and Dummy(3) are different keys)."""
    r = _Reader(payload)
    a = r.u32()
    int_keys, int_counts = r.array("<i8", a), r.array("<i8", a)
    b = r.u32()
    lengths = r.array("<u4", b).tolist()
    try:
        strs = [r.take(n).decode("utf-8", "surrogatepass") for n in lengths]
    except UnicodeDecodeError as exc:
        raise SketchFormatError(f"invalid UTF-8 in a str key: {exc}") from None
    str_counts = r.array("<i8", b)
    c = r.u32()
    dummy_index, dummy_counts = r.array("<u4", c).astype(np.int64), r.array("<i8", c)
    r.done()
    if has_duplicates(int_keys) or len(set(strs)) != b or has_duplicates(dummy_index):
        raise SketchFormatError("duplicate keys in counter payload")
    return CounterParts(
        int_keys.astype(np.int64, copy=False),
        int_counts.astype(np.int64, copy=False),
        strs,
        str_counts.astype(np.int64, copy=False),
        dummy_index,
        dummy_counts.astype(np.int64, copy=False),
    )


def decode_counters(payload: bytes) -> dict[Key, int]:
    """Inverse of :func:`encode_counters`; rejects truncation, bad UTF-8 and duplicate keys."""
    return decode_counter_parts(payload).to_dict()


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
