"""Stable, seeded 64-bit hashing of items (never Python's per-process salted ``hash()``).

* ints: the SplitMix64 finaliser (Steele–Lea–Flood) of ``x XOR mix(seed + γ)``, vectorised over int64
  arrays with numpy's wrapping uint64 arithmetic;
* strs: ``xxh3_64`` of the UTF-8 bytes (lone surrogates kept via ``surrogatepass``) with the seed.

Row ``j`` of a Count-Min sketch uses the top 32 bits of ``mix(base_hash XOR salt_j)`` scaled to
``[0, width)``, where the salts are a SplitMix64 sequence from the seed. The values are identical across processes, machines and runs,
so sketches built on different shards merge correctly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xxhash

MASK64 = 2**64 - 1
_GAMMA = 0x9E3779B97F4A7C15
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)


def mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser applied elementwise to a uint64 array (returns a new array)."""
    z = np.array(values, dtype=np.uint64, copy=True, ndmin=1)
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def _seed_key(seed: int) -> np.uint64:
    return mix64(np.array([(seed + _GAMMA) & MASK64], dtype=np.uint64))[0]


def hash_int_array(values: np.ndarray, seed: int) -> np.ndarray:
    """Seeded 64-bit hashes of an int64 array."""
    as_u64 = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    return mix64(as_u64 ^ _seed_key(seed))


def hash_str_list(values: Sequence[str], seed: int) -> np.ndarray:
    """Seeded 64-bit hashes (xxh3_64) of strings."""
    digest = xxhash.xxh3_64_intdigest
    s = seed & MASK64
    return np.fromiter(
        (digest(v.encode("utf-8", "surrogatepass"), s) for v in values), dtype=np.uint64, count=len(values)
    )


def row_salts(seed: int, depth: int) -> np.ndarray:
    """``depth`` per-row salts: the SplitMix64 output sequence started at ``seed``."""
    steps = (seed + _GAMMA * np.arange(1, depth + 1, dtype=object)) & MASK64
    return mix64(np.array([int(s) for s in steps], dtype=np.uint64))


MAX_WIDTH = 2**32


def bucket_indices(base_hashes: np.ndarray, salts: np.ndarray, width: int) -> np.ndarray:
    """Array of shape (len(salts), len(base_hashes)): the bucket of each item in each row, from the
    top 32 bits of ``mix64(hash XOR salt)`` scaled to [0, width) (Lemire's multiply-shift range
    reduction; width <= 2**32)."""
    out = np.empty((len(salts), len(base_hashes)), dtype=np.intp)
    w = np.uint64(width)
    for j, salt in enumerate(salts):
        z = mix64(base_hashes ^ salt)
        z >>= _S32
        z *= w
        z >>= _S32
        out[j] = z
    return out


def item_hashes(items: object, seed: int) -> np.ndarray:
    """Seeded 64-bit base hashes of ``items`` (an int array, or a sequence of ints / strs, each
    normalised by :func:`privstream.sketches.order.normalize_item`), in order: SplitMix64 for ints,
    xxh3 for strs (the hashes of every Count-Min table: CountMinSketch, DPSW's PCMSs)."""
    from privstream.sketches.order import normalize_item

    if isinstance(items, np.ndarray) and items.dtype.kind in "iu":
        return hash_int_array(items.astype(np.int64, copy=False), seed)
    keys = [normalize_item(x) for x in items]  # type: ignore[attr-defined]
    if all(type(x) is int for x in keys):
        return hash_int_array(np.array(keys, dtype=np.int64), seed)
    out = np.empty(len(keys), dtype=np.uint64)
    ints = [i for i, x in enumerate(keys) if type(x) is int]
    strs = [i for i, x in enumerate(keys) if type(x) is str]
    out[ints] = hash_int_array(np.array([keys[i] for i in ints], dtype=np.int64), seed)
    out[strs] = hash_str_list([str(keys[i]) for i in strs], seed)
    return out


def min_over_rows(table: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """The Count-Min query for a batch: ``min_r table[r, buckets[r, i]]`` per column i."""
    return np.take_along_axis(table, buckets, axis=1).min(axis=0)
