"""Non-private mergeable sketches that every private release starts from.

Every sketch implements one protocol, :class:`Sketch` (:class:`KeyedSketch` for sketches that store
their keys): ``update`` one stream element, ``update_batch`` (exactly item by item), ``merge``,
``to_bytes``/``from_bytes``, ``estimate``, ``k``, ``n``, ``build``
(:mod:`privstream.sketches.protocol`). Lists of sketches merge with :func:`merge_in_order` only.

* :class:`MisraGries` — Lebeda–Tětek Alg. 1 (k slots, dummy keys, smallest-zero-key eviction);
* :class:`StandardMisraGries` — textbook MG; merges of MG sketches (Agarwal et al.) fold into it;
* :class:`PrivacyAwareMisraGries` — Alg. 4 (user level; the stream element is one user's set);
* :func:`reduce_sensitivity` — Alg. 3 (exact rationals over k+1); :func:`sum_reduced`;
* :class:`CountMinSketch` — seeded stable hashing, vectorised batches;
* :class:`ExactHistogram` — exact counts (the reference; sensitivity 1, build ``EXACT``).

Each MG-type sketch records its :class:`Build` (``build.guarantees`` = neighbour structure, used by
the release layer); every sketch has ``to_bytes``/``from_bytes`` in one versioned binary format
(:mod:`privstream.sketches.binary_format`) under the type code it declares with
:func:`register_sketch`, and :func:`load_sketch` decodes any of them. A sketch is registered when
its module is imported: import it here.
"""

from privstream.sketches.binary_format import (
    SketchFormatError,
    load_sketch,
    register_sketch,
    registered_sketches,
)
from privstream.sketches.build import Build, BuildGuarantees, register_build
from privstream.sketches.count_min import CountMinSketch
from privstream.sketches.exact import EXACT, ExactHistogram
from privstream.sketches.histogram import Counts, exact_histogram
from privstream.sketches.merge import merge_in_order
from privstream.sketches.misra_gries import MisraGries, StandardMisraGries
from privstream.sketches.order import Dummy, Item, Key, item_order_key, normalize_item, sorted_items
from privstream.sketches.pamg import PrivacyAwareMisraGries, check_user_items
from privstream.sketches.protocol import KeyedSketch, Sketch
from privstream.sketches.sensitivity_reduction import ReducedSketch, reduce_sensitivity, sum_reduced

__all__ = [
    "Build",
    "BuildGuarantees",
    "CountMinSketch",
    "Counts",
    "Dummy",
    "EXACT",
    "ExactHistogram",
    "Item",
    "Key",
    "KeyedSketch",
    "MisraGries",
    "PrivacyAwareMisraGries",
    "ReducedSketch",
    "Sketch",
    "SketchFormatError",
    "StandardMisraGries",
    "check_user_items",
    "exact_histogram",
    "item_order_key",
    "load_sketch",
    "merge_in_order",
    "normalize_item",
    "reduce_sensitivity",
    "register_build",
    "register_sketch",
    "registered_sketches",
    "sorted_items",
    "sum_reduced",
]
