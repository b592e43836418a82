"""State and behaviour shared by the Misra–Gries-type sketches (MG, standard MG, PAMG).

A sketch holds its counters, ``k``, ``n`` (total weight seen) and its
:class:`~privstream.sketches.build.Build`, and implements the sketch protocol
(:class:`~privstream.sketches.protocol.KeyedSketch`). ``merge`` goes through
:func:`~privstream.sketches.merge.mg_merge`; batch updates are item by item (compiled kernels), never
a merge; serialisation through the shared binary format, under the class's registered type code.

Counters live in a dict (``_counters``, what sequential updates mutate) and/or, after a merge or
batch, in a numpy-backed :class:`~privstream.sketches.histogram.Counts` (``_summary``), so that
consecutive batches never convert k counters to Python objects and back; the dict is built lazily
when an update or query needs it. Invariant: at least one is set; if both are, they agree
(:class:`~privstream.sketches.misra_gries.MisraGries` may instead hold its Alg. 1 slots as
:class:`~privstream.sketches.kernels.Alg1Arrays`).

Bytes go straight between arrays and the payload when no dict is materialised: ``to_bytes`` encodes
the summary's (or Alg. 1 slots') arrays with :func:`~privstream.sketches.binary_format.encode_counter_parts`
— the same bytes as the dict path — and ``from_bytes`` decodes into arrays
(:func:`~privstream.sketches.binary_format.decode_counter_parts`), checks the payload invariants
with numpy and restores a ``Counts`` summary (standard MG, merged, PAMG) or, through
``_restore_slots`` / ``_restore_extra``, the Alg. 1 slots. A streaming shard's per-message
load → ``update_batch`` → store therefore costs O(k) numpy work, never k Python objects.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Self

import numpy as np

from privstream.sketches.binary_format import (
    CounterParts,
    decode,
    decode_build,
    decode_counter_parts,
    encode,
    encode_counter_parts,
    encode_counters,
    exact_sum,
    require,
)
from privstream.sketches.build import Build
from privstream.sketches.histogram import Counts
from privstream.sketches.merge import mg_merge
from privstream.sketches.order import Dummy, Item, Key, item_order_key, normalize_item
from privstream.sketches.protocol import KeyedSketch, Sketch
from privstream.validation import check_int

_NONE = np.zeros(0, dtype=np.int64)


class CounterSketch(KeyedSketch):
    """Base class of the Misra–Gries-type sketches; subclasses set the class attributes below and
    register a type code (``@register_sketch``)."""

    _merged_build: ClassVar[Build]
    _family: ClassVar[str]  # sketches merge only within a family (same privacy unit)
    _n_extra_params: ClassVar[int] = 0

    def __init__(self, k: int, build: Build) -> None:
        self._k = check_int("k", k, allow_numpy=True)
        self._n = 0
        self._build = build
        self._counters: dict[Key, int] | None = {}
        self._summary: Counts | None = None

    def _read(self) -> dict[Key, int]:
        """The counters as a dict (built from the summary if needed)."""
        if self._counters is None:
            self._counters = self._summary.to_dict()  # type: ignore[union-attr, assignment]
        return self._counters  # type: ignore[return-value]

    def _write(self) -> dict[Key, int]:
        """The dict, about to be mutated by a sequential update: the summary becomes stale."""
        counters = self._read()
        self._summary = None
        return counters

    def _as_counts(self) -> Counts:
        """The counters as :class:`Counts` (Dummy and zero-count keys dropped)."""
        return self._summary if self._summary is not None else Counts.from_mapping(self._read())

    # ------------------------------------------------------------------ queries
    @property
    def k(self) -> int:
        return self._k

    @property
    def n(self) -> int:
        """Total weight (number of items) summarised."""
        return self._n

    @property
    def build(self) -> Build:
        return self._build

    def estimate(self, item: object) -> int:
        """Estimated frequency of ``item`` (0 if not stored); never above the true frequency."""
        return self._read().get(normalize_item(item), 0)

    def counters(self) -> dict[Item, int]:
        """Real keys with a positive count, in the universe's total order (sorted with numpy when
        the counters are held as arrays)."""
        if self._counters is None:
            return self._as_counts().to_sorted_dict()
        pairs = [(x, c) for x, c in self._read().items() if c > 0 and type(x) is not Dummy]
        pairs.sort(key=lambda p: item_order_key(p[0]))
        return dict(pairs)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(k={self._k}, n={self._n}, build={self._build.name}, keys={len(self.counters())})"

    # ------------------------------------------------------------------ merging
    def _absorb(self, counts: Counts, weight: int) -> None:
        """Merge an exact histogram or another sketch's counters into this sketch."""
        self._summary = mg_merge(self._as_counts(), counts, self._k)
        self._counters = None
        self._n += weight
        self._build = self._merged_build
        self._after_merge()

    def _after_merge(self) -> None:
        """Hook for subclasses with extra sequential state."""

    def _check_mergeable(self, other: Sketch) -> None:
        if not isinstance(other, CounterSketch) or other._family != self._family:
            raise TypeError(f"cannot merge {type(other).__name__} into {type(self).__name__}")
        if other.k < self._k:
            raise ValueError(
                f"other.k={other.k} is smaller than k={self._k}: the merged error bound would break"
            )

    def merge(self, other: Sketch) -> None:
        """In place: self <- Merge(self, other) (Agarwal et al.; Lebeda–Tětek Lemma 7.1); the build
        becomes the merged build (Cor. 7.2 / Cor. 8.10 for a fixed merge order)."""
        self._check_mergeable(other)
        assert isinstance(other, CounterSketch)
        self._absorb(other._as_counts(), other.n)

    def _standard_update(self, x: Item) -> None:
        """Standard MG step: increment, insert into a free counter, or decrement all and drop zeros."""
        self._standard_steps((x,))

    def _standard_steps(self, xs: Iterable[Item]) -> None:
        """The standard MG step for each of the valid keys ``xs`` in order, in one loop over one dict
        (``n`` is the caller's)."""
        counters, k = self._write(), self._k
        for x in xs:
            if x in counters:
                counters[x] += 1
            elif len(counters) < k:
                counters[x] = 1
            else:
                counters = {y: c - 1 for y, c in counters.items() if c > 1}
        self._counters = counters

    # ------------------------------------------------------------------ bytes
    def _extra_params(self) -> list[int]:
        return []

    def _restore_extra(self, extra: tuple[int, ...]) -> None:
        """Set subclass state from the extra parameters and validate ``_counters``."""

    def _payload(self) -> bytes:
        """The counter payload: straight from the summary's arrays when no dict is materialised
        (same bytes as :func:`encode_counters` of the dict)."""
        if self._counters is None and self._summary is not None:
            s = self._summary
            return encode_counter_parts(s.int_keys, s.int_counts, s.str_counts.items(), _NONE, _NONE)
        return encode_counters(self._read())

    def to_bytes(self) -> bytes:
        params = [self._k, self._n, self._build.code, *self._extra_params()]
        return encode(type(self), params, self._payload())

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        params, payload = decode(data, cls, 3 + cls._n_extra_params)
        k, n, build_code = params[:3]
        build = decode_build(build_code)
        require(build in cls._allowed_builds(), f"build {build.name} is invalid for {cls.__name__}")
        require(k >= 1, "k must be >= 1")
        sketch = cls.__new__(cls)
        CounterSketch.__init__(sketch, k, build)
        sketch._n = n
        parts = decode_counter_parts(payload)
        counts = parts.all_counts()
        require(bool((counts >= 0).all()) and exact_sum(counts) <= n, "counts must be >= 0 and sum to <= n")
        if build is not Build.ALG1_SEQUENTIAL:
            require(len(parts) <= k, "more than k counters")
            require(bool((counts > 0).all()), "zero counters stored outside an Alg. 1 sketch")
            require(len(parts.dummy_index) == 0, "dummy keys outside an Alg. 1 sketch")
            # positive counts, no dummies: exactly a Counts (kept as arrays until a dict is needed)
            strs = dict(zip(parts.str_keys, parts.str_counts.tolist(), strict=True))
            sketch._counters, sketch._summary = None, Counts(parts.int_keys, parts.int_counts, strs)
        else:
            sketch._restore_slots(parts)
        sketch._restore_extra(params[3:])
        return sketch

    def _restore_slots(self, parts: CounterParts) -> None:
        """Set the decoded slots of an Alg. 1 build (validated afterwards by ``_restore_extra``)."""
        self._counters = parts.to_dict()

    @classmethod
    def _allowed_builds(cls) -> tuple[Build, ...]:
        raise NotImplementedError
