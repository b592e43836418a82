"""Merging: :func:`merge_in_order`, the one way to merge a list of sketches, and :func:`mg_merge`, the
mergeable-summaries merge of Misra–Gries counters (Agarwal, Cormode, Huang, Phillips, Wei, Yi 2013)
behind ``merge`` of MG, standard MG and PAMG.

Two sketches merge with the protocol method ``a.merge(b)`` (in place); a list of sketches — the
shards of a job, in shard-id order — with ``merge_in_order(sketches)``, which folds them into a new
sketch. There is no per-sketch merge function.

``Merge(c1, c2)``: sum the counters per key, subtract the value of the (k+1)-th largest sum (0 when
there are at most k keys), drop non-positive counters; at most k keys remain. Lebeda–Tětek
Lemma 7.1 / Cor. 7.2: for any *fixed* merge order, neighbouring inputs give merged counters that
differ by 1 on at most k keys, all with the same sign — *provided every other merged input is
unchanged*. That is why no batch update of one stream goes through this merge: cutting one stream
into count-cut batches and merging each batch's exact histogram would move every later batch
boundary when one event is removed (neighbouring sketches then differ by far more than 1); batch
updates run Alg. 1 / Alg. 4 item by item instead (:mod:`privstream.sketches.kernels`). Merging is
for sketches of sub-streams cut by a rule that depends on each event alone (a hash of its item or
user, its own timestamp against public punctuations).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import overload

import numpy as np

from privstream.sketches.histogram import Counts
from privstream.sketches.protocol import KeyedSketch, Sketch
from privstream.sketches.validation import common_param

logger = logging.getLogger(__name__)


def kth_largest(counts: np.ndarray, rank: int) -> int:
    """Value of the ``rank``-th largest entry (1-based) of ``counts``; 0 if there are fewer entries."""
    if len(counts) < rank:
        return 0
    pivot = len(counts) - rank
    return int(np.partition(counts, pivot)[pivot])


def mg_merge(a: Counts, b: Counts, k: int) -> Counts:
    """Agarwal et al. merge of two summaries into at most ``k`` counters."""
    summed = a.plus(b)
    offset = kth_largest(summed.all_counts(), k + 1)
    return summed.shifted_down(offset) if offset > 0 else summed


@overload
def merge_in_order(sketches: Iterable[KeyedSketch], *, k: int | None = None) -> KeyedSketch: ...
@overload
def merge_in_order(sketches: Iterable[Sketch], *, k: int | None = None) -> Sketch: ...
def merge_in_order(sketches: Iterable[Sketch], *, k: int | None = None) -> Sketch:
    """Fold ``sketches`` into a new sketch in the given order: ``out <- Merge(out, s)`` for each s,
    starting from ``sketches[0].merge_accumulator(k)``; the inputs are unchanged.

    The caller fixes the order independently of the data (e.g. by shard id): Lebeda–Tětek
    Cor. 7.2 (Cor. 8.10 for PAMG) holds for any *fixed* order, by induction with Lemma 7.1. The
    result carries the merged build even for a single input, and its type is the accumulator's:
    ``StandardMisraGries`` (build ``MERGED``) for Alg. 1 and standard MG inputs, PAMG
    (``PAMG_MERGED``) for PAMG, Count-Min for Count-Min. ``k`` defaults to the inputs' common k
    (ValueError if they differ) and may not exceed any input's k. ValueError for no sketches."""
    sketches = list(sketches)
    if not sketches:
        raise ValueError("sketches must not be empty: merge_in_order needs one sketch to know the type")
    out = sketches[0].merge_accumulator(common_param(sketches, "k") if k is None else k)
    for sketch in sketches:
        out.merge(sketch)
    logger.debug("merged %d %s sketches into %r", len(sketches), type(sketches[0]).__name__, out)
    return out
