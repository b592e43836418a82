"""What the studies share: an *arm* (a sketch released by a mechanism), one release of it with its
metrics row, and the timed sketch rows.

An :class:`Arm` names which of a cell's sketches it releases and with which registered mechanism;
:func:`release_arm` releases it once with the study's seeded noise source and measures it against
the truth (:func:`~privstream.eval.metrics.release_metrics`), including the coverage of the stated
error bound with its sketch term evaluated on the true stream — per item for a per-shard release
(n_p/(k+1) of the item's item-hashed shard p, :func:`partition_term`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from privstream.accounting import Budget
from privstream.eval.harness import StudyContext
from privstream.eval.metrics import (
    GroundTruth,
    Histogram,
    SketchTerm,
    release_metrics,
    sketch_errors,
    sketch_memory,
    sketch_term_value,
    timed,
)
from privstream.eval.results import Row
from privstream.eval.workloads import Workload
from privstream.mechanisms import Release, names, release, release_disjoint, release_partitions
from privstream.partitioning import partition_for
from privstream.sketches import ExactHistogram, MisraGries, PrivacyAwareMisraGries


@dataclass(frozen=True)
class Arm:
    """One released configuration: ``label`` (plots), ``part`` (the group of arms it belongs to),
    the ``sketch`` it releases (a key of the cell's sketches), the ``mechanism``, whether it needs
    the workload's domain, whether it is the flattened group-privacy release (group_size = m),
    whether it releases the shard sketches separately and sums them (``disjoint``:
    :func:`~privstream.mechanisms.release_disjoint`) and whether it is Alg. 3 per partition
    (``partitions``: :func:`~privstream.mechanisms.release_partitions`, LT §7)."""

    label: str
    part: str
    sketch: str
    mechanism: str
    domain: bool = False
    group: bool = False
    disjoint: bool = False
    partitions: bool = False


def unavailable(arm: Arm) -> str:
    """ "" if the mechanism ``arm`` needs is registered, else the reason (recorded as a note)."""
    return "" if arm.mechanism in ("auto", *names()) else f"mechanism {arm.mechanism!r} is not registered"


@dataclass
class Cell:
    """What one cell's releases share: the workload, its truth and domain, k, ε, m."""

    workload: Workload
    truth: GroundTruth
    k: int
    epsilon: float
    m: int | None = None


def warm_up() -> None:
    """Compile the numba kernels before anything is timed (the first call compiles or loads them)."""
    MisraGries(4).update_batch(np.arange(16, dtype=np.int64))
    PrivacyAwareMisraGries(4, 2).update_batch_flat(np.arange(4, dtype=np.int64), np.array([0, 2, 4]))


def sketch_row(
    workload: str,
    name: str,
    k: int,
    m: int | None,
    sketch: Any,
    events: int,
    seconds: float,
    truth: GroundTruth,
) -> Row:
    """One row of the ``sketches`` table: build, throughput, memory and the sketch's own error."""
    row: Row = {
        "workload": workload,
        "sketch": name,
        "build": sketch.build.name,
        "k": k,
        "m": m,
        "events": events,
        "seconds": seconds,
        "events_per_s": events / seconds if seconds > 0 else float("nan"),
    }
    row.update(sketch_memory(sketch))
    row.update(sketch_errors(truth, sketch))
    return row


def shard_sketches(w: Workload, k: int, shards: int) -> tuple[list[MisraGries], float]:
    """One Alg. 1 sketch per shard, the shards chosen by a hash of the item (never by position,
    LT Cor. 7.2; the job's partitioner), and the seconds the updates took."""
    shard_of = partition_for(w.items, shards)
    parts = [MisraGries(k) for _ in range(shards)]
    seconds = sum(timed(partial(p.update_batch, w.items[shard_of == i])) for i, p in enumerate(parts))
    return parts, seconds


def exact_sketch(w: Workload, truth: GroundTruth, rows: list[Row]) -> ExactHistogram:
    """The exact histogram of the workload (the reference), timed into ``rows``."""
    exact = ExactHistogram()
    seconds = timed(partial(exact.update_batch, w.items))
    rows.append(sketch_row(w.name, "exact", 1, None, exact, w.n, seconds, truth))
    return exact


def threshold_of(rel: Release) -> float:
    """The release's threshold parameter (NaN if it has none)."""
    value = dict(rel.parameters).get("threshold")
    return float(value) if isinstance(value, int | float) else float("nan")


def partition_term(parts: Sequence[Any], k: int) -> SketchTerm:
    """S of a keys-disjoint per-shard release: n_p/(k+1) of each item's shard p (item-hashed)."""
    ns = np.array([p.n for p in parts], dtype=np.float64)

    def term(keys: np.ndarray) -> np.ndarray:
        return ns[partition_for(keys, len(parts))] / (k + 1)

    return term


def release_arm(ctx: StudyContext, cell: Cell, arm: Arm, sketch: Any, rep: int, **extra: Any) -> Row:
    """One release of ``arm`` in ``cell`` (``extra``: further release arguments, e.g. ``n_bound``)
    and its metrics row."""
    s = ctx.settings
    budget = Budget(cell.epsilon, s.delta)
    rng = ctx.rng(cell.workload.name, arm.part, arm.sketch, arm.mechanism, cell.k, cell.epsilon, cell.m, rep)
    domain = cell.workload.domain if arm.domain else None
    term: SketchTerm
    if arm.partitions:  # Alg. 3 per partition, summed (LT §7): the sketch term is N/(k+1) in total
        rel = release_partitions(sketch, budget, domain=domain, rng=rng, beta=s.beta)  # type: ignore[arg-type]
        reference = Histogram.from_mapping({x: c for p in sketch for x, c in p.counters().items()})
        term = sketch_term_value(rel.error_bound.sketch_term, sum(p.n for p in sketch), cell.k)
    elif arm.disjoint:
        rel = release_disjoint(
            sketch, budget, mechanism=arm.mechanism, rng=rng, beta=s.beta, domain=domain, **extra
        )
        reference = Histogram.from_mapping({x: c for p in sketch for x, c in p.counters().items()})
        term = partition_term(sketch, cell.k)
    else:
        group_size = cell.m if arm.group and cell.m else 1
        rel = release(
            sketch,
            budget,
            mechanism=arm.mechanism,
            rng=rng,
            beta=s.beta,
            domain=domain,
            group_size=group_size,
            **extra,
        )
        reference = Histogram.from_mapping(sketch.counters())
        term = sketch_term_value(rel.error_bound.sketch_term, sketch.n, sketch.k)
    row: Row = {
        "workload": cell.workload.name,
        "part": arm.part,
        "arm": arm.label,
        "mechanism": rel.mechanism,
        "sketch": arm.sketch,
        "k": cell.k,
        "epsilon": cell.epsilon,
        "delta": rel.delta,
        "m": cell.m,
        "rep": rep,
        "threshold": threshold_of(rel),
    }
    row.update(
        release_metrics(cell.truth, rel.items, bound=rel.error_bound, sketch_term=term, reference=reference)
    )
    return row


def run_arms(
    ctx: StudyContext,
    cell: Cell,
    arms: Sequence[tuple[Arm, Any]],
    reps: int,
    rows: list[Row],
    bar: Any,
    **extra: Any,
) -> None:
    """``reps`` releases of every (arm, sketch) of ``cell`` into ``rows``, advancing the progress ``bar``."""
    for arm, sketch in arms:
        for rep in range(reps):
            rows.append(release_arm(ctx, cell, arm, sketch, rep, **extra))
            bar.update()
