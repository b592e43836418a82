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
