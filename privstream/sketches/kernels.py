"""Compiled (numba) sequential kernels: Lebeda–Tětek Alg. 1 and Alg. 4 item by item, at batch speed.

The privacy of a Misra–Gries release rests on the neighbour structure of *sequential* processing
(Alg. 1: Lemma 2; Alg. 4: Lemma 8.9). A batch update that merged each batch's histogram would make
the sketch depend on where batches are cut — with count-cut batches, one removed event shifts every
later boundary and neighbouring sketches differ by far more than 1 per counter. These kernels
process a batch *exactly* as the item-by-item loop does, so the result never depends on batching.

Both kernels work on int64 items and keep their state in arrays:

* a hash table (open addressing, linear probing, backward-shift deletion) from item to slot;
* Alg. 1: ``keys``/``counts``/``dummy`` per slot, and ``zeros`` — the slots whose count is 0, sorted
  in the universe's order (ints numerically, then ``Dummy(0) < Dummy(1) < …``), consumed from
  ``zpos``. While a dummy is left no real count can be 0 (a decrement needs every count >= 1), and
  real zeros appear only at a decrement, so one sorted list per decrement finds the smallest
  zero-count key of Branch 3 exactly; a slot in the list whose count has become positive is skipped.
  Decrements cost O(k) and happen at most n/(k+1) times: amortised O(1) per item.
* Alg. 4: compact ``keys``/``counts`` of at most k + m live keys; a user's items are incremented
  (inserted at 1), then if more than k keys are stored all counts drop by one and zeros are removed.
"""

from __future__ import annotations

import builtins
from itertools import chain

import numpy as np


def _import_njit():  # noqa: ANN202
    """``numba.njit``, imported with the real ``print`` in ``builtins``.

    PyFlink's Beam worker (standalone clusters) replaces ``builtins.print`` with a bound method of
    its own ``CustomPrint`` object; numba registers ``print`` at import by looking it up as
    ``getattr(module, name)`` on ``print.__module__``, which fails there. The real ``print`` (kept by
    that object as ``_print``) is put back for the import only."""
    current = builtins.print
    original = getattr(getattr(current, "__self__", None), "_print", None)
    if original is not None:
        builtins.print = original
    try:
        from numba import njit

        return njit
    finally:
        builtins.print = current


njit = _import_njit()

_EMPTY = -1
_FIB = np.uint64(0x9E3779B97F4A7C15)


def table_capacity(slots: int) -> int:
    """Power of two >= 2 * slots (load factor <= 1/2)."""
    return 1 << max(4, int(2 * slots - 1).bit_length())


@njit(cache=True)
def _shift(capacity: int) -> int:
    """64 - log2(capacity): the right shift of Fibonacci hashing onto ``capacity`` buckets."""
    bits = 0
    while (1 << bits) < capacity:
        bits += 1
    return 64 - bits


@njit(cache=True, inline="always")
def _home(x: int, shift: int) -> np.int64:
    return np.int64((np.uint64(x) * _FIB) >> np.uint64(shift))


@njit(cache=True)
def _find(table: np.ndarray, keys: np.ndarray, x: int, shift: int) -> int:
    """Slot of ``x`` or -1."""
    mask = len(table) - 1
    i = _home(x, shift)
    while True:
        s = table[i]
        if s == _EMPTY:
            return -1
        if keys[s] == x:
            return s
        i = (i + 1) & mask


@njit(cache=True)
def _insert(table: np.ndarray, keys: np.ndarray, slot: int, shift: int) -> None:
    mask = len(table) - 1
    i = _home(keys[slot], shift)
    while table[i] != _EMPTY:
        i = (i + 1) & mask
    table[i] = slot


@njit(cache=True)
def _delete(table: np.ndarray, keys: np.ndarray, x: int, shift: int) -> None:
    """Remove ``x`` (present) with backward-shift deletion (no tombstones)."""
    mask = len(table) - 1
    i = _home(x, shift)
    while keys[table[i]] != x:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        s = table[j]
        if s == _EMPTY:
            break
        h = _home(keys[s], shift)
        # keep table[j] where it is if its home lies cyclically in (i, j]
        if i <= j:
            if i < h <= j:
                continue
        elif h > i or h <= j:
            continue
        table[i] = s
        i = j
    table[i] = _EMPTY


@njit(cache=True)
def build_table(keys: np.ndarray, live: np.ndarray, capacity: int) -> np.ndarray:
    """Hash table over the slots with ``live[slot]``."""
    table = np.full(capacity, _EMPTY, dtype=np.int64)
    shift = _shift(capacity)
    for s in range(len(keys)):
        if live[s]:
            _insert(table, keys, s, shift)
    return table


@njit(cache=True)
def alg1_run(
    items: np.ndarray,
    keys: np.ndarray,
    counts: np.ndarray,
    dummy: np.ndarray,
    table: np.ndarray,
    zeros: np.ndarray,
    state: np.ndarray,
) -> None:
    """Lebeda–Tětek Alg. 1 on ``items`` in order. ``state`` = [zlen, zpos, decrements] (in/out)."""
    k = len(keys)
    shift = _shift(len(table))
    zlen, zpos, decrements = state[0], state[1], state[2]
    for x in items:
        s = _find(table, keys, x, shift)
        if s >= 0:  # Branch 1: increment (also a zero count)
            counts[s] += 1
            continue
        while zpos < zlen and counts[zeros[zpos]] != 0:
            zpos += 1
        if zpos == zlen:  # Branch 2: every count >= 1: decrement all, drop x
            decrements += 1
            zlen = 0
            for i in range(k):
                counts[i] -= 1
                if counts[i] == 0:
                    zeros[zlen] = i
                    zlen += 1
            order = np.argsort(keys[zeros[:zlen]], kind="mergesort")
            zeros[:zlen] = zeros[:zlen][order]
            zpos = 0
        else:  # Branch 3: replace the smallest zero-count key by x
            s = zeros[zpos]
            zpos += 1
            if dummy[s]:
                dummy[s] = False
            else:
                _delete(table, keys, keys[s], shift)
            keys[s] = x
            counts[s] = 1
            _insert(table, keys, s, shift)
    state[0], state[1], state[2] = zlen, zpos, decrements


@njit(cache=True)
def pamg_run(
    items: np.ndarray,
    offsets: np.ndarray,
    k: int,
    keys: np.ndarray,
    counts: np.ndarray,
    table: np.ndarray,
    state: np.ndarray,
) -> None:
    """Lebeda–Tětek Alg. 4, one user ``items[offsets[u]:offsets[u+1]]`` (distinct) at a time.
    ``keys``/``counts`` have room for k + m keys, the first ``state[0]`` live."""
    shift = _shift(len(table))
    size = state[0]
    for u in range(len(offsets) - 1):
        for t in range(offsets[u], offsets[u + 1]):
            x = items[t]
            s = _find(table, keys, x, shift)
            if s >= 0:
                counts[s] += 1
            else:
                keys[size] = x
                counts[size] = 1
                _insert(table, keys, size, shift)
                size += 1
        if size > k:  # decrement all once for this user, remove zeros, re-index
            w = 0
            for i in range(size):
                c = counts[i] - 1
                if c > 0:
                    keys[w] = keys[i]
                    counts[w] = c
                    w += 1
            size = w
            table[:] = _EMPTY
            for i in range(size):
                _insert(table, keys, i, shift)
    state[0] = size


class Alg1Arrays:
    """Array state of a Lebeda–Tětek Alg. 1 sketch with int (and dummy) keys, for :func:`alg1_run`.

    Slot ``s`` holds ``keys[s]`` (the dummy index if ``dummy[s]``) with ``counts[s]``; the slot order
    is arbitrary (only the keys matter to Alg. 1). The sketch's bytes are encoded from these arrays
    and restored into them (:mod:`privstream.sketches.misra_gries`), so a per-message
    load → ``update_batch`` → store never goes through Python objects."""

    __slots__ = ("counts", "dummy", "keys", "state", "table", "zeros")

    def __init__(self, keys: np.ndarray, counts: np.ndarray, dummy: np.ndarray, decrements: int) -> None:
        self.keys, self.counts, self.dummy = keys, counts, dummy
        self.zeros = np.zeros(len(keys), dtype=np.int64)
        zlen = _sorted_zero_slots(keys, counts, dummy, self.zeros)
        self.state = np.array([zlen, 0, decrements], dtype=np.int64)
        self.table = build_table(keys, ~dummy, table_capacity(len(keys)))

    @classmethod
    def fresh(cls, k: int) -> Alg1Arrays:
        """Alg. 1's initial state: slot i holds ``Dummy(i)`` at count 0."""
        return cls(np.arange(k, dtype=np.int64), np.zeros(k, dtype=np.int64), np.ones(k, dtype=bool), 0)

    @property
    def decrements(self) -> int:
        return int(self.state[2])

    def run(self, items: np.ndarray) -> None:
        alg1_run(items, self.keys, self.counts, self.dummy, self.table, self.zeros, self.state)

    def pairs(self) -> list[tuple[int, int, bool]]:
        """``(key or dummy index, count, is_dummy)`` per slot."""
        return list(zip(self.keys.tolist(), self.counts.tolist(), self.dummy.tolist(), strict=True))

    def real(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the (int key, count) arrays of the non-dummy slots, sorted by key."""
        return _sorted_by_key(self.keys[~self.dummy], self.counts[~self.dummy])

    def dummies(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the (dummy index, count) arrays of the dummy slots, sorted by index."""
        return _sorted_by_key(self.keys[self.dummy], self.counts[self.dummy])


def _is_increasing(values: np.ndarray) -> bool:
    return len(values) < 2 or bool(np.all(values[1:] > values[:-1]))


def _sorted_by_key(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if _is_increasing(keys):
        return keys, counts
    order = np.argsort(keys, kind="stable")
    return keys[order], counts[order]


def _sorted_zero_slots(keys: np.ndarray, counts: np.ndarray, dummy: np.ndarray, out: np.ndarray) -> int:
    """Write the slots at count 0 into ``out`` in the universe's order — real (int) keys
    numerically, then dummies by index — and return how many there are (``zlen``)."""
    zero = np.flatnonzero(counts == 0)
    at = 0
    for part in (zero[~dummy[zero]], zero[dummy[zero]]):
        if not _is_increasing(keys[part]):
            part = part[np.argsort(keys[part], kind="stable")]
        out[at : at + len(part)] = part
        at += len(part)
    return at


def pamg_update(
    pairs: list[tuple[int, int]], k: int, m: int, items: np.ndarray, offsets: np.ndarray
) -> list[tuple[int, int]]:
    """Alg. 4 over the users of ``items``/``offsets`` starting from the live ``(key, count)`` pairs;
    returns the new pairs."""
    room = k + m
    keys = np.zeros(room, dtype=np.int64)
    counts = np.zeros(room, dtype=np.int64)
    if pairs:  # flattened with fromiter: ~3x faster than np.array on a list of tuples
        flat = np.fromiter(chain.from_iterable(pairs), dtype=np.int64, count=2 * len(pairs))
        keys[: len(pairs)], counts[: len(pairs)] = flat[0::2], flat[1::2]
    live = np.arange(room) < len(pairs)
    table = build_table(keys, live, table_capacity(room))
    state = np.array([len(pairs)], dtype=np.int64)
    pamg_run(items, offsets, k, keys, counts, table, state)
    size = int(state[0])
    return list(zip(keys[:size].tolist(), counts[:size].tolist(), strict=True))
