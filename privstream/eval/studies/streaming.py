"""Study ``streaming``: the heavy-hitters job's release modes against the exact-count reference.

The job splits the stream into shards by a hash of the item (the producer's partitioner,
:func:`~privstream.partitioning.partition_for`; the job verifies it per event), keeps one
sequential Alg. 1 sketch per shard and releases an epoch in one of two modes
(:mod:`privstream.operators.sketch_spec`):

* **per shard** (the MG default, ``--release-mode per-shard``): every shard's sketch released with
  ``auto`` (PMG: Lebeda–Tětek Alg. 2, threshold independent of k) and the releases summed —
  :func:`~privstream.mechanisms.release_disjoint`, parallel composition over the partition;
* **merged** (``--release-mode merged``): the shards merged in shard-id order (Cor. 7.2) and released
  with GSHM (Thm 8.5, l = k) or thresholded Laplace(k/ε), whose thresholds grow with k.

Also weighed: Alg. 3 per shard, summed, pure ε-DP over the declared domain (LT §7 route a,
:func:`~privstream.mechanisms.release_partitions`). The reference is the exact histogram released
with thresholded discrete Laplace(1/ε) (``exact_threshold``) at the same (ε, δ).

This study calls the same core functions the job's operators call on the same per-shard sketches
(the sketch operator's ``update_batch`` is exactly item by item, so message boundaries do not
matter); ``tests/test_flink_heavy_hitters.py`` checks that the Flink job's release equals
``release_disjoint`` of core's per-shard sketches with the same noise. One epoch holds the whole
workload, released under the add/remove-one-event relation of time epochs (count epochs state a
replacement and calibrate for two steps, Lemma 8.1: about twice the noise for both modes and the
reference alike). At the default k = 65,536 every shard of these workloads holds fewer distinct
items than k, so the sketch itself is exact there and the per-shard error is PMG's noise: the
shared η plus each key's own (expected ratio to the reference 1.53–1.79, :func:`_expected_ratio`);
at smaller k the n_p/(k+1) term adds to it. Study parameters (``--param``): ``shards`` (default 4),
``goal_reps`` (default 100).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from privstream.eval.arms import (
    Arm,
    Cell,
    exact_sketch,
    release_arm,
    run_arms,
    shard_sketches,
    sketch_row,
    unavailable,
    warm_up,
)
from privstream.eval.claims import Claim, coverage_verdict
from privstream.eval.harness import Settings, StudyContext, StudyOutput, register_study
from privstream.eval.metrics import GroundTruth
from privstream.eval.results import PlotSpec, Row
from privstream.mechanisms.exact_threshold import exact_threshold
from privstream.partitioning import partition_for
from privstream.sketches import merge_in_order

NAME = "streaming"

PER_SHARD = Arm("per-shard PMG, summed (job default)", "job", "shards", "auto", disjoint=True)
MERGED_GSHM = Arm("merged + GSHM", "job", "merged", "gshm")
MERGED_LAPLACE = Arm("merged + thresholded Laplace(k/ε)", "job", "merged", "laplace_threshold")
ALG3_SHARDS = Arm(
    "Alg. 3 per shard, summed (§7 a, pure ε)", "weighed", "shards", "pure_topk", domain=True, partitions=True
)
EXACT = Arm(
    "exact histogram + thresholded Laplace(1/ε)", "reference", "exact", "exact_threshold", domain=True
)
ARMS = (PER_SHARD, MERGED_GSHM, MERGED_LAPLACE, ALG3_SHARDS, EXACT)

DEFAULTS = Settings(
    workloads=("zipf", "gaussian"),
    optional_workloads=("movielens", "flights"),
    ks=(512, 4096, 65536),
    epsilons=(0.5, 1.0, 2.0),
    delta=1e-6,
    beta=0.05,
    reps=5,
)
TINY = Settings(
    workloads=("tiny:count=20000",),
    ks=(8, 512),
    epsilons=(1.0,),
    reps=3,
    params={"shards": "2", "goal_reps": "10"},
)

#: The goal: the job's default mode within this factor of the exact-count reference's MAE on the
#: true top-10 ...
GOAL_RATIO = 2.0
#: ... on streams whose true top-10 counts all exceed this multiple of the reference's threshold.
ELIGIBLE_MULTIPLE = 10
#: Releases of the two compared arms per (workload, ε) at the largest k. PMG's shared η makes a
#: release's top-10 errors move together, and at ε = 2 most of the reference's errors are 0, so the
#: ratio of two means needs many releases: the expected ratio there is 1.79 (see _expected_ratio).
GOAL_REPS = 100


def _shards(ctx: StudyContext) -> int:
    (shards,) = ctx.int_list("shards", (4,), minimum=2)[:1]
    return shards


def run(ctx: StudyContext) -> StudyOutput:
    """Every arm, ``reps`` times, for every (workload, k, ε)."""
    s = ctx.settings
    shards = _shards(ctx)
    arms = [a for a in ARMS if not unavailable(a)]
    workloads = ctx.workloads()
    runs: list[Row] = []
    sketch_rows: list[Row] = []
    eligibility: list[Row] = []
    warm_up()
    goal_reps = max(s.reps, ctx.int_list("goal_reps", (GOAL_REPS,))[0])
    total = len(workloads) * len(s.epsilons) * (len(s.ks) * len(arms) * s.reps + 2 * (goal_reps - s.reps))
    with ctx.progress(total, NAME) as bar:
        for w in workloads:
            truth = GroundTruth(w.items, top=s.top, gamma=s.gamma)
            shard_of = partition_for(w.items, shards)  # the same hash partition as shard_sketches
            exact = exact_sketch(w, truth, sketch_rows)
            for eps in s.epsilons:
                eligibility.append(_eligibility(w.name, truth, eps, s.delta))
            for k in sorted(s.ks):
                bar.set_postfix(f"{w.name} k={k}")
                parts, seconds = shard_sketches(w, k, shards)
                for i, p in enumerate(parts):  # each shard against its own stream's truth
                    shard_truth = GroundTruth(w.items[shard_of == i], top=s.top, gamma=s.gamma)
                    name = f"shard {i}/{shards}"
                    sketch_rows.append(
                        sketch_row(w.name, name, k, None, p, p.n, seconds / shards, shard_truth)
                    )
                start = time.perf_counter()
                merged = merge_in_order(parts)
                seconds += time.perf_counter() - start  # the merged row: every shard's updates + the merge
                sketch_rows.append(sketch_row(w.name, "merged", k, None, merged, w.n, seconds, truth))
                sketches: dict[str, Any] = {"shards": parts, "merged": merged, "exact": exact}
                for eps in s.epsilons:
                    cell = Cell(w, truth, k, eps)
                    run_arms(ctx, cell, [(a, sketches[a.sketch]) for a in arms], s.reps, runs, bar)
                    if k == max(s.ks):  # the goal's cells: more repetitions of the two arms compared
                        for arm in (PER_SHARD, EXACT):
                            for rep in range(s.reps, goal_reps):
                                runs.append(release_arm(ctx, cell, arm, sketches[arm.sketch], rep))
                                bar.update()
    return StudyOutput(
        runs=runs,
        summary_by=("workload", "part", "arm", "k", "epsilon"),
        spread=("mae_high",),
        claims=_claims(runs, eligibility, s),
        plots=_plots(s.ks),
        tables={"sketches": sketch_rows, "eligibility": eligibility},
    )


def _eligibility(workload: str, truth: GroundTruth, epsilon: float, delta: float) -> Row:
    """Whether the true top-10 counts exceed ``ELIGIBLE_MULTIPLE`` × the reference's threshold."""
    top_counts = truth.hist.lookup(truth.top_keys)
    threshold = exact_threshold(epsilon, delta)
    smallest = float(top_counts.min()) if top_counts.size else 0.0
    return {
        "workload": workload,
        "epsilon": epsilon,
        "reference_threshold": threshold,
        "smallest_top_count": smallest,
        "eligible": smallest >= ELIGIBLE_MULTIPLE * threshold,
    }


def _mean(rows: Sequence[Row], col: str) -> float:
    values = [float(r[col]) for r in rows if r.get(col) is not None and not math.isnan(float(r[col]))]
    return sum(values) / len(values) if values else float("nan")


def _cells(runs: Sequence[Row], arm: Arm) -> dict[tuple[str, int, float], list[Row]]:
    out: dict[tuple[str, int, float], list[Row]] = {}
    for r in runs:
        if r["arm"] == arm.label:
            out.setdefault((r["workload"], r["k"], r["epsilon"]), []).append(r)
    return out


def _expected_ratio(epsilon: float) -> float:
    """E|η + Z| / E|Z| for independent discrete Laplace(1/ε) η, Z: the ratio of PMG's noise error on
    a stored key (shared + own noise, Alg. 2) to the exact reference's (own noise only), computed
    from the two laws (no sampling). 1.53 at ε = 0.5, 1.61 at ε = 1, 1.79 at ε = 2."""
    a = math.exp(-epsilon)
    z = np.arange(-400, 401)
    pmf = (1 - a) / (1 + a) * a ** np.abs(z)
    total = np.convolve(pmf, pmf)
    return float((total * np.abs(np.arange(-800, 801))).sum() / (pmf * np.abs(z)).sum())


def _goal_claim(runs: Sequence[Row], eligibility: Sequence[Row], ks: Sequence[int]) -> Claim:
    """Per-shard MAE on the true top-10 within 2× of the exact reference's, at the largest k, on
    every eligible (workload, ε) — each stream on its own; the ratio pooled over the workloads and
    the exact expected ratio of the two noise laws are reported beside it."""
    k = max(ks)
    eligible = {(e["workload"], e["epsilon"]) for e in eligibility if e["eligible"]}
    per_shard, exact = _cells(runs, PER_SHARD), _cells(runs, EXACT)
    pooled: dict[float, tuple[list[Row], list[Row]]] = {}
    cells = []
    for (workload, kk, eps), rows in sorted(per_shard.items()):
        if kk != k or (workload, eps) not in eligible:
            continue
        ref = exact[(workload, kk, eps)]
        pooled.setdefault(eps, ([], []))[0].extend(rows)
        pooled[eps][1].extend(ref)
        cells.append((workload, eps, _mean(rows, "mae_high") / max(_mean(ref, "mae_high"), 1e-9)))
    claim = f"the job's default (per shard) is within {GOAL_RATIO:g}x of an exact-count private histogram"
    expected = (
        f"at k={k}, on every (workload, ε) whose top-10 counts exceed {ELIGIBLE_MULTIPLE}x the "
        f"reference's threshold: MAE top-10 per shard <= {GOAL_RATIO:g} x the reference's"
    )
    if not cells:
        return Claim.skip(claim, "streaming goal", "no eligible (workload, ε)", expected)
    worst = max(cells, key=lambda c: c[2])
    pooled_text = "; ".join(
        f"ε={eps:g} {_mean(mine, 'mae_high') / max(_mean(ref, 'mae_high'), 1e-9):.2f}x "
        f"(expected {_expected_ratio(eps):.2f}x)"
        for eps, (mine, ref) in sorted(pooled.items())
    )
    measured = (
        f"worst {worst[0]} ε={worst[1]:g}: {worst[2]:.2f}x; pooled over workloads: {pooled_text}; "
        f"per cell: {', '.join(f'{w} ε={e:g} {r:.2f}x' for w, e, r in cells)}"
    )
    return Claim.check(claim, "streaming goal", measured, expected, all(r <= GOAL_RATIO for _, _, r in cells))


def _threshold_claim(runs: Sequence[Row], ks: Sequence[int]) -> Claim:
    """PMG's threshold does not grow with k; the merged mechanisms' do (LT §1, Thm 8.12)."""

    def thresholds(arm: Arm) -> list[float]:
        return [
            _mean([r for r in runs if r["arm"] == arm.label and r["k"] == k], "threshold") for k in sorted(ks)
        ]

    pmg, gshm = thresholds(PER_SHARD), thresholds(MERGED_GSHM)
    flat = len({round(t, 6) for t in pmg if not math.isnan(t)}) == 1
    grows = all(b > a for a, b in zip(gshm, gshm[1:], strict=False))
    measured = (
        f"per-shard PMG {[round(t) for t in pmg]}, merged GSHM {[round(t) for t in gshm]} (k={sorted(ks)})"
    )
    return Claim.check(
        "per-shard PMG's threshold is independent of k; merged GSHM's grows with k",
        "Lebeda-Tetek Thm 8 vs Thm 8.5/8.12",
        measured,
        "one PMG threshold for every k; GSHM's strictly increasing in k",
        flat and grows,
    )


def _per_shard_beats_merged_claim(runs: Sequence[Row], ks: Sequence[int]) -> Claim:
    """At the largest k the per-shard mode has a smaller top-10 MAE than either merged mechanism
    (GSHM's and Laplace's thresholds grow with k, PMG's does not)."""
    k = max(ks)
    per_shard = _cells(runs, PER_SHARD)
    merged = [_cells(runs, MERGED_GSHM), _cells(runs, MERGED_LAPLACE)]
    compared = wins = 0
    for key, rows in per_shard.items():
        if key[1] != k:
            continue
        compared += 1
        best_merged = min(_mean(m[key], "mae_high") for m in merged if key in m)
        wins += _mean(rows, "mae_high") < best_merged
    claim, expected = (
        "per shard beats merged (GSHM, Laplace) on MAE top-10 at large k",
        f"every cell at k={k}",
    )
    if not compared:
        return Claim.skip(claim, "job default", f"no cell at k={k}", expected)
    return Claim.check(
        claim, "job default", f"smaller in {wins} of {compared} cells", expected, wins == compared
    )


def _coverage_claim(runs: Sequence[Row], beta: float) -> Claim:
    """Every mode's stated error bound holds in at least 1 − β of its runs (binomial test)."""
    worst: tuple[float, str] | None = None
    failed = []
    for arm in ARMS:
        rows = [r for r in runs if r["arm"] == arm.label and r.get("covered") is not None]
        if not rows:
            continue
        covered = int(sum(r["covered"] for r in rows))
        ok, _ = coverage_verdict(covered, len(rows), beta)
        rate = covered / len(rows)
        if worst is None or rate < worst[0]:
            worst = (rate, arm.label)
        if not ok:
            failed.append(f"{arm.label} {covered}/{len(rows)}")
    claim, source = (
        "every mode's stated bound holds w.p. >= 1-β",
        "ErrorBound (Thm 8, Thm 8.5, §6, exact_threshold)",
    )
    expected = "coverage not significantly below 1-β (binomial test, 0.999)"
    if worst is None:
        return Claim.skip(claim, source, "no runs", expected)
    measured = f"lowest {worst[0]:.3f} ({worst[1]})" + (f"; failed: {', '.join(failed)}" if failed else "")
    return Claim.check(claim, source, measured, expected, not failed)


def _auto_claim(runs: Sequence[Row]) -> Claim:
    """``auto`` on a shard's Alg. 1 sketch picks PMG (the smallest stated bound there)."""
    chosen = sorted({r["mechanism"] for r in runs if r["arm"] == PER_SHARD.label})
    return Claim.check(
        "auto picks PMG for the per-shard sketches",
        "registry auto_key",
        f"chosen: {chosen}",
        "['pmg']",
        chosen == ["pmg"],
    )


def _claims(runs: Sequence[Row], eligibility: Sequence[Row], s: Settings) -> list[Claim]:
    return [
        _goal_claim(runs, eligibility, s.ks),
        _threshold_claim(runs, s.ks),
        _per_shard_beats_merged_claim(runs, s.ks),
        _coverage_claim(runs, s.beta),
        _auto_claim(runs),
    ]


def _plots(ks: Sequence[int]) -> tuple[PlotSpec, ...]:
    return (
        PlotSpec(
            "mae_top10_vs_k",
            x="k",
            y="mae_high",
            series="arm",
            facet=("workload",),
            where={"epsilon": 1.0},
            logx=True,
            logy=True,
            title="MAE on the true top-10 vs k (ε = 1)",
        ),
        PlotSpec(
            "mae_top10_vs_epsilon",
            x="epsilon",
            y="mae_high",
            series="arm",
            facet=("workload",),
            where={"k": max(ks)},
            logy=True,
            title=f"MAE on the true top-10 vs ε (k = {max(ks)})",
        ),
        PlotSpec(
            "recall10_vs_k",
            x="k",
            y="topk_recall",
            series="arm",
            facet=("workload",),
            where={"epsilon": 1.0},
            logx=True,
            title="recall@10 vs k (ε = 1)",
        ),
    )


register_study(
    NAME,
    run,
    "the heavy-hitters job's release modes (per-shard PMG, merged GSHM/Laplace, Alg. 3 per shard) "
    "on item-hashed shards vs the exact-count private histogram",
    defaults=DEFAULTS,
    tiny=TINY,
)
