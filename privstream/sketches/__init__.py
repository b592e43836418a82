"""Non-private mergeable sketches that every private release starts from.

* :class:`MisraGries` — Lebeda–Tětek Alg. 1 (k slots, dummy keys, smallest-zero-key eviction);
* :class:`StandardMisraGries` — textbook MG; :func:`merge_misra_gries` — Agarwal et al. merge;
* :class:`PrivacyAwareMisraGries` — Alg. 4 (user level); :func:`merge_pamg`;
* :func:`reduce_sensitivity` — Alg. 3 (exact rationals over k+1); :func:`sum_reduced`;
* :class:`CountMinSketch` — seeded stable hashing, vectorised batches.

Each MG-type sketch records its :class:`Build` (``build.guarantees`` = neighbour structure, used by
the release layer); every sketch has ``to_bytes``/``from_bytes`` in one versioned binary format
(:mod:`privstream.sketches.binary_format`), and :func:`load_sketch` decodes any of them.
"""

from privstream.sketches.binary_format import SketchFormatError, SketchType, load_sketch
from privstream.sketches.build import Build, BuildGuarantees
from privstream.sketches.count_min import CountMinSketch
from privstream.sketches.histogram import Counts, exact_histogram
from privstream.sketches.misra_gries import MisraGries, StandardMisraGries, merge_misra_gries
from privstream.sketches.order import Dummy, Item, Key, item_order_key, normalize_item, sorted_items
from privstream.sketches.pamg import PrivacyAwareMisraGries, check_user_items, merge_pamg
from privstream.sketches.sensitivity_reduction import ReducedSketch, reduce_sensitivity, sum_reduced

__all__ = [
    "Build",
    "BuildGuarantees",
    "CountMinSketch",
    "Counts",
    "Dummy",
    "Item",
    "Key",
    "MisraGries",
    "PrivacyAwareMisraGries",
    "ReducedSketch",
    "SketchFormatError",
    "SketchType",
    "StandardMisraGries",
    "check_user_items",
    "exact_histogram",
    "item_order_key",
    "load_sketch",
    "merge_misra_gries",
    "merge_pamg",
    "normalize_item",
    "reduce_sensitivity",
    "sorted_items",
    "sum_reduced",
]
