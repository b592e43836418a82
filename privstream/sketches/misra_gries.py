"""Misra–Gries sketches: Lebeda–Tětek Alg. 1, standard MG, and the mergeable-summaries merge.

:class:`MisraGries` is Alg. 1 exactly: k slots initialised with the dummy keys ``Dummy(0..k-1)``;
for an arriving item x

1. x stored: increment it (also if its count is 0);
2. x absent and every count >= 1: decrement all k counts, x is dropped (zero-count keys stay);
3. otherwise replace the *smallest* zero-count key in the universe's total order
   (:mod:`privstream.sketches.order`) by x with count 1.

The smallest zero-count key is found with a heap of zero-count keys with lazy deletion; a
decrement costs O(k) but happens at most n/(k+1) times, so updates are amortised O(1).
Estimates equal those of standard MG (Fact 1): f(x) - n/(k+1) <= estimate <= f(x).

``update_batch`` and ``merge`` use the Agarwal et al. merge; afterwards the sketch is a standard MG
summary with build ``MERGED`` (Cor. 7.2) and later ``update`` calls use the standard MG step,
which equals merging a one-item summary, so the MERGED structure is kept.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np

from privstream.sketches.binary_format import SketchType, register, require
from privstream.sketches.build import Build
from privstream.sketches.counter_sketch import CounterSketch, common_param, merge_all_into
from privstream.sketches.histogram import exact_histogram
from privstream.sketches.order import Dummy, Key, item_order_key, normalize_item


class _MisraGriesBase(CounterSketch):
    _merged_build: ClassVar[Build] = Build.MERGED
    _family: ClassVar[str] = "event"

    def update_batch(self, items: Iterable[object] | np.ndarray) -> None:
        """Merge the batch's exact histogram in (vectorised); the build becomes ``MERGED``
        (also for an empty batch, so the build never depends on the data)."""
        hist = exact_histogram(items)
        self._absorb(hist, hist.total())


@register(SketchType.MISRA_GRIES)
class MisraGries(_MisraGriesBase):
    """Lebeda–Tětek Alg. 1 (see module docstring); build ``ALG1_SEQUENTIAL`` until merged."""

    _sketch_type: ClassVar[SketchType] = SketchType.MISRA_GRIES
    _n_extra_params: ClassVar[int] = 1

    def __init__(self, k: int) -> None:
        super().__init__(k, Build.ALG1_SEQUENTIAL)
        self._decrements = 0
        self._counters = {Dummy(i): 0 for i in range(self._k)}
        self._rebuild_zero_heap()

    @property
    def decrements(self) -> int:
        """Number α of decrement-all steps (Alg. 1 Branch 2) while the build was ALG1_SEQUENTIAL;
        then Σ slots = n - α(k+1) (Lebeda–Tětek §6). Not updated after a merge."""
        return self._decrements

    def _rebuild_zero_heap(self) -> None:
        zeros = [(item_order_key(x), x) for x, c in self._counters.items() if c == 0]
        heapq.heapify(zeros)
        self._zero_heap: list[tuple[tuple[int, int | str], Key]] | None = zeros
        self._num_zero = len(zeros)

    def update(self, item: object) -> None:
        """Process one stream item (Alg. 1 while the build is ALG1_SEQUENTIAL)."""
        x = normalize_item(item)
        self._n += 1
        if self._zero_heap is None:
            self._standard_update(x)
            return
        counters = self._counters
        c = counters.get(x)
        if c is not None:  # Branch 1
            if c == 0:
                self._num_zero -= 1
            counters[x] = c + 1
        elif self._num_zero == 0:  # Branch 2: decrement all, drop x
            self._decrements += 1
            self._counters = {y: v - 1 for y, v in counters.items()}
            self._rebuild_zero_heap()  # no zero keys before, so the old heap held only stale entries
        else:  # Branch 3: evict the smallest zero-count key
            heap = self._zero_heap
            while True:
                _, y = heapq.heappop(heap)
                if counters.get(y) == 0:
                    break
            del counters[y]
            counters[x] = 1
            self._num_zero -= 1
            if len(heap) > 4 * self._k + 64:  # drop stale entries
                self._rebuild_zero_heap()

    def slots(self) -> list[tuple[Key, int]]:
        """All k slots (zero-count and Dummy keys included) in the universe's total order."""
        if self._build is not Build.ALG1_SEQUENTIAL:
            raise ValueError(
                f"slots() needs an Alg. 1 sketch built sequentially, this one is {self._build.name}"
            )
        return sorted(self._counters.items(), key=lambda p: item_order_key(p[0]))

    def _after_merge(self) -> None:
        self._zero_heap = None

    def _extra_params(self) -> list[int]:
        return [self._decrements]

    def _restore_extra(self, extra: tuple[int, ...]) -> None:
        (self._decrements,) = extra
        if self._build is Build.ALG1_SEQUENTIAL:
            require(len(self._counters) == self._k, "an Alg. 1 sketch must have exactly k slots")
            total = self._n - self._decrements * (self._k + 1)
            require(sum(self._counters.values()) == total, "slots violate the sum identity n - α(k+1)")
            dummies = sorted(x.index for x in self._counters if type(x) is Dummy)
            # Alg. 1 uses dummies in order and only while one is left no decrement can happen, so
            # reachable states hold a suffix Dummy(j)..Dummy(k-1), all at 0, next to no real zero.
            require(
                dummies == list(range(self._k - len(dummies), self._k)), "dummies must be a suffix of 0..k-1"
            )
            if dummies:
                zero_keys = {x for x, c in self._counters.items() if c == 0}
                require(
                    zero_keys == {x for x in self._counters if type(x) is Dummy},
                    "while dummies are left, exactly the dummies are at 0",
                )
                require(self._decrements == 0, "an Alg. 1 sketch with dummies left has never decremented")
            self._rebuild_zero_heap()
        else:
            self._zero_heap = None

    @classmethod
    def _allowed_builds(cls) -> tuple[Build, ...]:
        return (Build.ALG1_SEQUENTIAL, Build.MERGED)


@register(SketchType.STANDARD_MISRA_GRIES)
class StandardMisraGries(_MisraGriesBase):
    """Textbook Misra–Gries (zero counters removed at once); build ``STANDARD_SEQUENTIAL`` until
    merged or batch-updated (then ``MERGED``)."""

    _sketch_type: ClassVar[SketchType] = SketchType.STANDARD_MISRA_GRIES

    def __init__(self, k: int) -> None:
        super().__init__(k, Build.STANDARD_SEQUENTIAL)

    def update(self, item: object) -> None:
        self._n += 1
        self._standard_update(normalize_item(item))

    @classmethod
    def _allowed_builds(cls) -> tuple[Build, ...]:
        return (Build.STANDARD_SEQUENTIAL, Build.MERGED)


def merge_misra_gries(sketches: Sequence[_MisraGriesBase], k: int | None = None) -> StandardMisraGries:
    """Merge MG sketches (Alg. 1 or standard, any build) in the given order, which the caller fixes
    independently of the data (e.g. by shard id); Lebeda–Tětek Cor. 7.2. Alg. 1 sketches lose their
    zero-count and Dummy keys first. ``k`` defaults to the common k of the inputs and may not exceed
    any input's k."""
    sketches = list(sketches)
    out = StandardMisraGries(common_param(sketches, "k") if k is None else k)
    return merge_all_into(out, sketches)
