"""Privacy-Aware Misra–Gries (Lebeda–Tětek Alg. 4) for user-level privacy.

Each user contributes a set of at most m < k *distinct* items. PAMG increments every item of the
user (inserting missing ones with count 1) and then, if more than k keys are stored, decrements
all counters once and removes zeros. Guarantees: error within [f(x) - ⌊N/(k+1)⌋, f(x)] (Lemma 8.8,
N = total items); removing one user changes at most k counters by exactly 1, all in the same
direction, with nested key sets (Lemma 8.9): ℓ2-sensitivity √k independent of m.

The stream element of PAMG is one user's set: ``update(items)`` is the Alg. 4 step for one user.
``update_batch`` / ``update_batch_flat`` are exactly ``update`` applied to each user in order (int
items through the compiled kernel of :mod:`privstream.sketches.kernels`), so Lemma 8.9 holds for
the stream of users whatever its batching: a batch never changes the build. Only ``merge`` /
:func:`~privstream.sketches.merge.merge_in_order` give ``PAMG_MERGED`` (Cor. 8.10: one user added to
or removed from one of the merged streams, which must be split by a rule that does not depend on
other users, e.g. a hash of the user).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import numpy as np

from privstream.sketches.binary_format import register_sketch, require
from privstream.sketches.build import Build
from privstream.sketches.counter_sketch import CounterSketch
from privstream.sketches.kernels import pamg_update
from privstream.sketches.order import INT64_MAX, Item, normalize_item
from privstream.sketches.protocol import Sketch
from privstream.validation import check_int


def check_user_items(m: int, items: Iterable[object]) -> tuple[Item, ...]:
    """One user's normalised items; ValueError unless they are at most ``m`` distinct items
    (TypeError/ValueError from :func:`~privstream.sketches.order.normalize_item` for a bad item)."""
    xs = tuple(normalize_item(x) for x in items)
    if len(xs) > m:
        raise ValueError(f"a user may contribute at most m={m} items, got {len(xs)}")
    if len(set(xs)) != len(xs):
        raise ValueError(
            f"a user's items must be distinct, got {len(xs)} items of which {len(set(xs))} distinct"
        )
    return xs


@register_sketch(3)
class PrivacyAwareMisraGries(CounterSketch):
    """Alg. 4 with k counters for users of at most m distinct items (1 <= m < k); the stream element
    (``update``) is one user's set."""

    _merged_build: ClassVar[Build] = Build.PAMG_MERGED
    _family: ClassVar[str] = "user"
    _n_extra_params: ClassVar[int] = 2

    def __init__(self, k: int, m: int) -> None:
        super().__init__(k, Build.PAMG)
        self._m = check_int("m", m, allow_numpy=True)
        if self._m >= self._k:
            raise ValueError(f"m must be < k (Lebeda-Tetek §8 assumes k > m), got m={self._m}, k={self._k}")
        self._users = 0

    @property
    def m(self) -> int:
        return self._m

    @property
    def n_users(self) -> int:
        return self._users

    def update(self, items: Iterable[object]) -> None:
        """Alg. 4 step for one user's set of at most m distinct items (the stream element)."""
        self._add_user(check_user_items(self._m, items))

    def _add_user(self, xs: tuple[Item, ...]) -> None:
        """Alg. 4 step for one user's already checked items."""
        self._users += 1
        self._n += len(xs)
        counters = self._write()
        for x in xs:
            counters[x] = counters.get(x, 0) + 1
        if len(counters) > self._k:  # decrement all once for this user
            self._counters = {y: c - 1 for y, c in counters.items() if c > 1}

    def update_batch(self, users: Iterable[Iterable[object]]) -> None:
        """Exactly ``update`` for each user in order (Lemma 8.9 for the stream of users); every user
        is validated first, so a bad one leaves the sketch unchanged."""
        checked = [check_user_items(self._m, user) for user in users]
        for xs in checked:
            self._add_user(xs)

    def update_batch_flat(self, items: np.ndarray, offsets: np.ndarray) -> None:
        """Compiled batch: user i holds ``items[offsets[i]:offsets[i+1]]`` (int items). Checks sizes
        <= m and distinctness per user with numpy, then runs Alg. 4 user by user
        (:func:`privstream.sketches.kernels.pamg_run`): the same result as ``update_batch``."""
        items = np.asarray(items)
        offsets = np.asarray(offsets)
        if items.ndim != 1 or items.dtype.kind not in "iu":
            raise TypeError("items must be a 1-d integer array (use update_batch for str items)")
        if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) == 0:
            raise TypeError("offsets must be a non-empty 1-d integer array")
        sizes = np.diff(offsets)
        if offsets[0] != 0 or offsets[-1] != len(items) or (sizes < 0).any():
            raise ValueError("offsets must start at 0, be non-decreasing and end at len(items)")
        if len(sizes) and int(sizes.max()) > self._m:
            raise ValueError(f"a user may contribute at most m={self._m} items, got {int(sizes.max())}")
        if items.dtype.kind == "u" and len(items) and int(items.max()) > INT64_MAX:
            raise ValueError("item: int outside the signed 64-bit range")
        items64 = items.astype(np.int64, copy=False)
        _check_distinct_rows(items64, sizes)
        pairs = list(self._read().items())
        if any(type(x) is str for x, _ in pairs):  # keep Alg. 4 exact through the item path
            for start, stop in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
                self.update(items64[start:stop].tolist())
            return
        new = pamg_update(pairs, self._k, self._m, items64, offsets.astype(np.int64, copy=False))  # type: ignore[arg-type]
        self._counters, self._summary = dict(new), None
        self._users += len(sizes)
        self._n += len(items64)

    def _check_mergeable(self, other: Sketch) -> None:
        super()._check_mergeable(other)
        assert isinstance(other, PrivacyAwareMisraGries)  # the "user" family is PAMG only
        if other.m != self._m:
            raise ValueError(f"cannot merge PAMG sketches with different m: {other.m} != {self._m}")

    def merge(self, other: Sketch) -> None:
        """In place: Agarwal et al. merge (Lebeda–Tětek Cor. 8.10); users add up."""
        super().merge(other)
        assert isinstance(other, PrivacyAwareMisraGries)
        self._users += other.n_users

    def merge_accumulator(self, k: int) -> PrivacyAwareMisraGries:
        """An empty PAMG sketch of size ``k`` with this sketch's m (what ``merge_in_order`` folds into)."""
        return PrivacyAwareMisraGries(k, self._m)

    def _extra_params(self) -> list[int]:
        return [self._m, self._users]

    def _restore_extra(self, extra: tuple[int, ...]) -> None:
        self._m, self._users = extra
        require(1 <= self._m < self._k, "PAMG needs 1 <= m < k")
        require(self._n <= self._m * self._users, "more items than m * users")

    @classmethod
    def _allowed_builds(cls) -> tuple[Build, ...]:
        return (Build.PAMG, Build.PAMG_MERGED)


_PAIRWISE_MAX_WIDTH = 16


def _check_distinct_rows(items: np.ndarray, sizes: np.ndarray) -> None:
    """ValueError if some user's slice of ``items`` holds a repeated value. Users of <= 16 items:
    all column pairs of a (users x width) grid are compared; larger users: one lexsort."""
    if len(items) == 0:
        return
    width = int(sizes.max())
    if width <= _PAIRWISE_MAX_WIDTH:
        if bool((sizes == width).all()):
            grid = items.reshape(-1, width)
        else:
            grid = np.zeros((len(sizes), width), dtype=np.int64)
            grid[np.arange(width) < sizes[:, None]] = items  # row-major fill = the slices in order
        bad = np.zeros(len(sizes), dtype=bool)
        for j in range(1, width):
            present = sizes > j
            for i in range(j):
                bad |= (grid[:, i] == grid[:, j]) & present
        offenders = np.flatnonzero(bad)
    else:
        users = np.repeat(np.arange(len(sizes)), sizes)
        order = np.lexsort((items, users))
        values, owners = items[order], users[order]
        offenders = owners[1:][(values[1:] == values[:-1]) & (owners[1:] == owners[:-1])]
    if len(offenders):
        raise ValueError(
            f"a user's items must be distinct; user {int(offenders.min())} of the batch repeats an item"
        )
