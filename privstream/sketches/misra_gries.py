"""Misra–Gries sketches: Lebeda–Tětek Alg. 1, standard MG, and the mergeable-summaries merge.

:class:`MisraGries` is Alg. 1 exactly: k slots initialised with the dummy keys ``Dummy(0..k-1)``;
for an arriving item x

1. x stored: increment it (also if its count is 0);
2. x absent and every count >= 1: decrement all k counts, x is dropped (zero-count keys stay);
3. otherwise replace the *smallest* zero-count key in the universe's total order
   (:mod:`privstream.sketches.order`) by x with count 1.

Estimates equal those of standard MG (Fact 1): f(x) - n/(k+1) <= estimate <= f(x).

**Batches never change the semantics.** ``update_batch(items)`` is exactly ``for x in items:
update(x)`` — for int items through the compiled kernel of :mod:`privstream.sketches.kernels`, for
anything else item by item — so the sketch, its build and its release never depend on how a stream
was cut into batches or messages (Lemma 2 holds for the stream, whatever the batching). Merging
separate sketches (``merge``, :func:`~privstream.sketches.merge.merge_in_order`) is the Agarwal et
al. merge; ``merge_in_order`` folds MG sketches of either kind into a standard MG summary with build
``MERGED``, whose guarantee (Cor. 7.2) covers one event added to or
removed from *one of the merged streams*: the caller must have split the data into those streams by
a rule that does not depend on other events (shards by a hash of the item or user, time slices
closed by punctuations), never by position.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import ClassVar

import numpy as np

from privstream.sketches.binary_format import (
    CounterParts,
    dummy_keys,
    encode_counter_parts,
    exact_sum,
    register_sketch,
    require,
)
from privstream.sketches.build import Build
from privstream.sketches.counter_sketch import CounterSketch
from privstream.sketches.histogram import Counts
from privstream.sketches.kernels import Alg1Arrays
from privstream.sketches.order import INT64_MAX, Dummy, Item, Key, item_order_key, normalize_item


class _MisraGriesBase(CounterSketch):
    """Event-level MG sketches: ``update(item)``; ``update_batch`` is the protocol's item-by-item
    loop; merges of either kind fold into a :class:`StandardMisraGries` (build ``MERGED``)."""

    _merged_build: ClassVar[Build] = Build.MERGED
    _family: ClassVar[str] = "event"

    def merge_accumulator(self, k: int) -> StandardMisraGries:
        """An empty standard MG sketch of size ``k``: what ``merge_in_order`` folds MG sketches
        into (Agarwal et al. merge; Lebeda–Tětek §7 stores no zero-count keys)."""
        return StandardMisraGries(k)


@register_sketch(1)
class MisraGries(_MisraGriesBase):
    """Lebeda–Tětek Alg. 1 (see module docstring); build ``ALG1_SEQUENTIAL`` until merged.

    State: the k slots as :class:`Alg1Arrays` (a fresh sketch, after a compiled batch, after
    ``from_bytes`` of int-keyed slots) or as the dict that the item-by-item path mutates (with its
    zero-key heap; also whenever a str key is stored). The dict is built lazily from the arrays when
    a Python-path update or ``estimate`` needs it; ``to_bytes``, ``from_bytes``, ``counters``,
    ``slots`` and merges read the arrays directly (vectorised, same results and bytes)."""

    _n_extra_params: ClassVar[int] = 1

    def __init__(self, k: int) -> None:
        super().__init__(k, Build.ALG1_SEQUENTIAL)
        self._decrements = 0
        # Alg. 1 line 1: slots Dummy(0..k-1) at count 0
        self._counters = None
        self._arrays: Alg1Arrays | None = Alg1Arrays.fresh(self._k)
        self._zero_heap: list[tuple[tuple[int, int | str], Key]] | None = None
        self._num_zero = 0

    @property
    def decrements(self) -> int:
        """Number α of decrement-all steps (Alg. 1 Branch 2) while the build was ALG1_SEQUENTIAL;
        then Σ slots = n - α(k+1) (Lebeda–Tětek §6). Not updated after a merge."""
        return self._decrements

    def _read(self) -> dict[Key, int]:
        if self._counters is None and self._arrays is not None:
            keys = self._arrays.keys.tolist()
            at = np.flatnonzero(self._arrays.dummy).tolist()
            for i, d in zip(at, dummy_keys([keys[i] for i in at]), strict=True):
                keys[i] = d
            self._counters = dict(zip(keys, self._arrays.counts.tolist(), strict=True))
        return super()._read()

    def _as_counts(self) -> Counts:
        if self._arrays is not None:  # real keys with count > 0, copied (the kernel mutates arrays)
            live = ~self._arrays.dummy & (self._arrays.counts > 0)
            return Counts(self._arrays.keys[live], self._arrays.counts[live])
        return super()._as_counts()

    def counters(self) -> dict[Item, int]:
        if self._arrays is not None:
            return self._as_counts().to_sorted_dict()
        return super().counters()

    def _alg1_dict(self) -> dict[Key, int]:
        """The slots as the dict that the item-by-item path mutates (with its zero-key heap)."""
        counters = self._read()
        if self._arrays is not None or self._zero_heap is None:
            self._arrays = None
            self._rebuild_zero_heap()
        return counters

    def _rebuild_zero_heap(self) -> None:
        zeros = [(item_order_key(x), x) for x, c in self._read().items() if c == 0]
        heapq.heapify(zeros)
        self._zero_heap = zeros
        self._num_zero = len(zeros)

    def update(self, item: object) -> None:
        """Process one stream item (Alg. 1 while the build is ALG1_SEQUENTIAL)."""
        x = normalize_item(item)
        self._n += 1
        if self._build is not Build.ALG1_SEQUENTIAL:
            self._standard_update(x)
            return
        counters = self._alg1_dict()
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
            assert heap is not None
            while True:
                _, y = heapq.heappop(heap)
                if counters.get(y) == 0:
                    break
            del counters[y]
            counters[x] = 1
            self._num_zero -= 1
            if len(heap) > 4 * self._k + 64:  # drop stale entries
                self._rebuild_zero_heap()

    def update_batch(self, items: Iterable[object] | np.ndarray) -> None:
        """Exactly ``for x in items: self.update(x)``; int items of an Alg. 1 sketch whose keys are
        ints run through the compiled kernel (:func:`privstream.sketches.kernels.alg1_run`)."""
        batch = _int64_batch(items)
        if batch is None or self._build is not Build.ALG1_SEQUENTIAL:
            super().update_batch(items)
            return
        arrays = self._arrays or self._to_arrays()
        if arrays is None:  # a str key is stored: the item-by-item path keeps the order exact
            super().update_batch(batch.tolist())
            return
        arrays.run(batch)
        self._arrays, self._counters, self._zero_heap = arrays, None, None
        self._n += len(batch)
        self._decrements = arrays.decrements

    def _to_arrays(self) -> Alg1Arrays | None:
        pairs = list(self._read().items())
        if any(type(x) is str for x, _ in pairs):
            return None
        keys = np.array([x.index if type(x) is Dummy else x for x, _ in pairs], dtype=np.int64)
        counts = np.array([c for _, c in pairs], dtype=np.int64)
        dummy = np.array([type(x) is Dummy for x, _ in pairs], dtype=bool)
        return Alg1Arrays(keys, counts, dummy, self._decrements)

    def slots(self) -> list[tuple[Key, int]]:
        """All k slots (zero-count and Dummy keys included) in the universe's total order: what
        PMG (Lebeda–Tětek Alg. 2) noises; int keys numerically, then the dummies by index."""
        if self._build is not Build.ALG1_SEQUENTIAL:
            raise ValueError(
                f"slots() needs an Alg. 1 sketch built sequentially, this one is {self._build.name}"
            )
        if self._arrays is not None:
            keys, counts = self._arrays.real()
            index, zeros = self._arrays.dummies()
            out: list[tuple[Key, int]] = list(zip(keys.tolist(), counts.tolist(), strict=True))
            out += zip(dummy_keys(index.tolist()), zeros.tolist(), strict=True)
            return out
        return sorted(self._read().items(), key=lambda p: item_order_key(p[0]))

    def _after_merge(self) -> None:
        self._arrays = None
        self._zero_heap = None

    def _extra_params(self) -> list[int]:
        return [self._decrements]

    def _payload(self) -> bytes:
        if self._arrays is not None:  # same bytes as encode_counters(self._read())
            keys, counts = self._arrays.real()
            index, zeros = self._arrays.dummies()
            return encode_counter_parts(keys, counts, (), index, zeros)
        return super()._payload()

    def _restore_slots(self, parts: CounterParts) -> None:
        """All-int slots go straight into :class:`Alg1Arrays` (validated vectorised by
        ``_restore_extra``); slots with a str key into the dict of the item-by-item path."""
        if parts.str_keys:
            super()._restore_slots(parts)
            return
        keys = np.concatenate([parts.int_keys, parts.dummy_index])
        counts = np.concatenate([parts.int_counts, parts.dummy_counts])
        dummy = np.arange(len(keys)) >= len(parts.int_keys)
        self._counters, self._arrays = None, Alg1Arrays(keys, counts, dummy, 0)

    def _restore_extra(self, extra: tuple[int, ...]) -> None:
        """Validate a decoded Alg. 1 state: exactly k slots, Σ slots = n − α(k+1) (Lebeda–Tětek
        §6), the dummies a suffix Dummy(j)..Dummy(k-1), and while one is left exactly the dummies
        at 0 and α = 0 (reachable states of Alg. 1 only, whose neighbours Lemma 2 describes)."""
        (self._decrements,) = extra
        self._zero_heap = None
        arrays = self._arrays = getattr(self, "_arrays", None)  # set by _restore_slots (int keys)
        if arrays is not None:
            self._check_arrays(arrays)
            arrays.state[2] = self._decrements
            return
        if self._build is Build.ALG1_SEQUENTIAL:
            counters = self._read()
            require(len(counters) == self._k, "an Alg. 1 sketch must have exactly k slots")
            total = self._n - self._decrements * (self._k + 1)
            require(sum(counters.values()) == total, "slots violate the sum identity n - α(k+1)")
            dummies = sorted(x.index for x in counters if type(x) is Dummy)
            # Alg. 1 uses dummies in order and only while one is left no decrement can happen, so
            # reachable states hold a suffix Dummy(j)..Dummy(k-1), all at 0, next to no real zero.
            require(
                dummies == list(range(self._k - len(dummies), self._k)), "dummies must be a suffix of 0..k-1"
            )
            if dummies:
                zero_keys = {x for x, c in counters.items() if c == 0}
                require(
                    zero_keys == {x for x in counters if type(x) is Dummy},
                    "while dummies are left, exactly the dummies are at 0",
                )
                require(self._decrements == 0, "an Alg. 1 sketch with dummies left has never decremented")

    def _check_arrays(self, arrays: Alg1Arrays) -> None:
        """``_restore_extra``'s checks on restored int-keyed slots, with numpy."""
        k, keys, counts, dummy = self._k, arrays.keys, arrays.counts, arrays.dummy
        require(len(keys) == k, "an Alg. 1 sketch must have exactly k slots")
        total = self._n - self._decrements * (k + 1)
        require(exact_sum(counts) == total, "slots violate the sum identity n - α(k+1)")
        index = keys[dummy]
        if not _increasing(index):
            index = np.sort(index)
        # strictly increasing from k - c to k - 1 (c = number of dummies): exactly k-c, ..., k-1
        suffix = len(index) == 0 or (_increasing(index) and index[0] == k - len(index) and index[-1] == k - 1)
        require(bool(suffix), "dummies must be a suffix of 0..k-1")
        if len(index):
            require(
                bool(np.array_equal(counts == 0, dummy)),
                "while dummies are left, exactly the dummies are at 0",
            )
            require(self._decrements == 0, "an Alg. 1 sketch with dummies left has never decremented")

    @classmethod
    def _allowed_builds(cls) -> tuple[Build, ...]:
        return (Build.ALG1_SEQUENTIAL, Build.MERGED)


def _increasing(values: np.ndarray) -> bool:
    return len(values) < 2 or bool(np.all(values[1:] > values[:-1]))


def _int64_batch(items: Iterable[object] | np.ndarray) -> np.ndarray | None:
    """``items`` as an int64 array if they are all ints in range (else None: the item path
    normalises and rejects them one by one)."""
    if isinstance(items, np.ndarray):
        kind = items.dtype.kind
        if kind == "i":
            return items.astype(np.int64, copy=False).ravel()
        if kind == "u" and (items.size == 0 or int(items.max()) <= INT64_MAX):
            return items.astype(np.int64).ravel()
        return None
    if isinstance(items, list | tuple) and all(type(x) is int for x in items):
        try:
            return np.array(items, dtype=np.int64)
        except OverflowError:
            return None
    return None


@register_sketch(2)
class StandardMisraGries(_MisraGriesBase):
    """Textbook Misra–Gries (zero counters removed at once); build ``STANDARD_SEQUENTIAL`` until
    merged (then ``MERGED``); ``update_batch`` is item by item."""

    def __init__(self, k: int) -> None:
        super().__init__(k, Build.STANDARD_SEQUENTIAL)

    def update(self, item: object) -> None:
        """Process one stream item (standard MG step)."""
        self._n += 1
        self._standard_update(normalize_item(item))

    def update_batch(self, items: Iterable[object] | np.ndarray) -> None:
        """Exactly ``for x in items: self.update(x)``. A batch of int items in the int64 range (already
        valid keys) runs the standard MG steps in one loop (:meth:`_standard_steps`; Chan et al.'s PCC
        feeds every level's core this way, issue 25); other batches go item by item, so a bad item
        raises after the items before it, as in the loop."""
        batch = _int64_batch(items)
        if batch is None:
            super().update_batch(items)
            return
        self._standard_steps(batch.tolist())
        self._n += len(batch)

    @classmethod
    def _allowed_builds(cls) -> tuple[Build, ...]:
        return (Build.STANDARD_SEQUENTIAL, Build.MERGED)
