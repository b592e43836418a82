"""The one protocol every privstream sketch implements: :class:`Sketch`, and :class:`KeyedSketch`
for sketches that store their keys (what the release layer releases).

References are to Lebeda–Tětek, "Better Differentially Private Approximate Histograms and Heavy
Hitters using the Misra-Gries Sketch" (§§6–8 restart their numbering, written here as Lemma 7.1).

Semantics of each member (every implementation must keep them; ``tests/test_sketch_protocol.py``
checks them for every registered sketch class):

* ``update(element)`` — process one **stream element**: one item (Misra–Gries Alg. 1, standard MG,
  Count-Min, unit weight) or one user's set of at most m distinct items (PAMG, Alg. 4). The element
  is the privacy unit of the sketch's sequential build.
* ``update_batch(elements)`` — exactly ``for e in elements: update(e)``. The result never depends on
  how a stream is cut into batches: a compiled kernel may replace the loop only if it gives the same
  sketch (the same bytes). This is what keeps the neighbour structure of the *stream* — Alg. 1 /
  Lemma 2 (neighbouring streams give sketches with |T ∩ T'| ≥ k − 2 that differ by 1 on one or on
  all k counters), Alg. 4 / Lemma 8.9 for users — whatever the message or micro-batch boundaries;
  merging per-batch summaries instead would move every later batch boundary when one element is
  removed. The default implementation is the loop.
* ``merge(other)`` — in place, ``self <- Merge(self, other)``; ``other`` is unchanged. For
  Misra–Gries-type sketches the Agarwal et al. merge; the build becomes the merged build, whose
  guarantee is Lemma 7.1 by induction over a *fixed* merge order (Cor. 7.2; Cor. 8.10 for PAMG): the
  merged counters of inputs that differ in one element of *one* of the merged streams differ by 1
  on at most k keys, all with the same sign. Incompatible sketches (another family, smaller k,
  other parameters) raise TypeError / ValueError and leave ``self`` unchanged.
* ``merge_accumulator(k)`` — a new, empty sketch of the type and parameters that merges of sketches
  like this one fold into, with size parameter ``k`` (MG of either kind: a ``StandardMisraGries``;
  PAMG: a PAMG with the same m; Count-Min: the same width, depth and seed). The one generic fold,
  :func:`privstream.sketches.merge.merge_in_order`, starts from it.
* ``to_bytes()`` / ``from_bytes(data)`` — the versioned, checksummed binary format
  (:mod:`privstream.sketches.binary_format`); ``from_bytes(to_bytes())`` is the same sketch, its
  ``to_bytes()`` the same bytes, and ``from_bytes`` rejects bytes of other types, versions and
  invalid states. The class's type code is declared with
  :func:`~privstream.sketches.binary_format.register_sketch`.
* ``estimate(item)`` — the sketch's frequency estimate of ``item`` (MG types: within
  [f(x) − n/(k+1), f(x)], Fact 1; Count-Min: ≥ f(x)).
* ``counters()`` (:class:`KeyedSketch` only) — the stored keys with a positive count, in the
  universe's total order (never in hash or insertion order).
* ``k`` — the size parameter that fixes the error bound: at most k counters (MG types, PAMG);
  Count-Min: the width, i.e. counters per row (overestimate ≤ e·n/k).
* ``n`` — total number of items summarised (for PAMG the sum of the users' set sizes).
* ``build`` — what the release layer needs to know about how the sketch was built: a
  :class:`~privstream.sketches.build.Build`, which fixes its neighbour structure; ``None`` for a
  sketch that has no private release path (Count-Min), which the release layer refuses.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, ClassVar, Self

from privstream.sketches.build import Build
from privstream.sketches.order import Item


class Sketch(abc.ABC):
    """A mergeable, serialisable stream sketch (see the module docstring for each member's
    semantics). Concrete subclasses register a type code with ``@register_sketch(code)``."""

    #: the stable type byte of the binary format, set by ``@register_sketch``
    type_code: ClassVar[int]

    @property
    @abc.abstractmethod
    def k(self) -> int:
        """Size parameter fixing the error bound (MG types: counters; Count-Min: width)."""

    @property
    @abc.abstractmethod
    def n(self) -> int:
        """Total number of items summarised."""

    @property
    @abc.abstractmethod
    def build(self) -> Build | None:
        """How the sketch was built (its neighbour structure); None: no private release path."""

    @abc.abstractmethod
    def update(self, element: Any) -> None:
        """Process one stream element (an item; for PAMG one user's set)."""

    def update_batch(self, elements: Iterable[Any]) -> None:
        """Exactly ``for e in elements: self.update(e)`` (Lebeda–Tětek Alg. 1 / Lemma 2: batch
        boundaries never change the sketch). Overrides must give the same sketch."""
        for element in elements:
            self.update(element)

    @abc.abstractmethod
    def merge(self, other: Sketch) -> None:
        """In place: ``self <- Merge(self, other)`` (Lebeda–Tětek Lemma 7.1, Cor. 7.2)."""

    @abc.abstractmethod
    def merge_accumulator(self, k: int) -> Sketch:
        """A new, empty sketch (size parameter ``k``) that merges of sketches like this fold into."""

    @abc.abstractmethod
    def to_bytes(self) -> bytes:
        """The sketch in the versioned binary format."""

    @classmethod
    @abc.abstractmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Decode :meth:`to_bytes` output; SketchFormatError for anything else."""

    @abc.abstractmethod
    def estimate(self, item: object) -> int:
        """Frequency estimate of ``item``."""


class KeyedSketch(Sketch):
    """A sketch that stores its keys (Misra–Gries types, PAMG): the release layer reads
    :meth:`counters`, ``k`` and ``build``."""

    @abc.abstractmethod
    def counters(self) -> dict[Item, int]:
        """Stored keys with a positive count, in the universe's total order."""

    @abc.abstractmethod
    def merge_accumulator(self, k: int) -> KeyedSketch:
        """A new, empty keyed sketch (size parameter ``k``) that merges of sketches like this fold into."""
