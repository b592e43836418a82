"""Study ``lebeda-tetek``: Lebeda & Tětek, "Better Differentially Private Approximate Histograms and
Heavy Hitters using the Misra-Gries Sketch" (PODS 2023 / TODS), reproduced on privstream.

The paper has no experiments of its own; this study measures its theorems and comparisons:

* **event level, one stream** (§5, §6): PMG (Alg. 2, discrete §5.2) on the Alg. 1 sketch; PMG with
  the §5.1 threshold on a standard MG sketch (``pmg_standard``); Alg. 3 + Laplace(2/ε) top-k over the
  domain (``pure_topk``, §6); Chan et al.'s baselines ``chan_topk`` (Laplace(k/ε) top-k) and
  ``chan_pmg`` (their Alg. 1), which need the declared domain;
* **merged shards** (§7): the stream split into shards by a hash of the item
  (:func:`~privstream.partitioning.partition_for`), one Alg. 1 sketch per shard, merged with
  :func:`~privstream.sketches.merge_in_order` (Cor. 7.2) and released with GSHM (Thm 8.5, l = k),
  thresholded Laplace(k/ε) and Chan's top-k — PMG is refused there (§7); and, where the library has
  it, PMG per shard combined by parallel composition (``release_disjoint``);
* **exact-count reference** (§1's non-streaming setting): an exact histogram released with
  thresholded discrete Laplace(1/ε) (``exact_threshold``), with the declared domain (simultaneous bound);
* **user level** (§8): users' sets of at most m distinct items; PAMG (Alg. 4) + GSHM (Thm 8.12),
  merged PAMG over user-hashed shards (Cor. 8.10), against PMG on the flattened stream with group
  privacy (Lemma 8.2: ``release(..., group_size=m)``).

Each cell (workload, k, ε[, m]) releases every arm ``reps`` times with a seeded noise source and
records the metrics of :mod:`privstream.eval.metrics`. The grid is a cross by default (every k at
ε₀, every ε at k₀; ``--param design=full`` for all pairs). Study parameters (``--param``): ``m``
(user set sizes, comma-separated), ``shards``, ``design``, ``k0``, ``eps0``, ``user_reps``.
The claims checked are listed in :func:`_claims` and in docs/eval.md.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from privstream.accounting import Budget
from privstream.eval.arms import (
    Arm,
    Cell,
    exact_sketch,
    run_arms,
    shard_sketches,
    sketch_row,
    unavailable,
    warm_up,
)
from privstream.eval.claims import Claim, coverage_verdict
from privstream.eval.harness import Settings, StudyContext, StudyOutput, register_study
from privstream.eval.metrics import (
    GroundTruth,
    timed,
)
from privstream.eval.results import PlotSpec, Row, select, summarize
from privstream.eval.workloads import Workload, user_sets
from privstream.mechanisms import MechanismNotApplicable, release
from privstream.partitioning import partition_for
from privstream.sketches import MisraGries, PrivacyAwareMisraGries, StandardMisraGries, merge_in_order

logger = logging.getLogger(__name__)

NAME = "lebeda-tetek"

# ---- arms: (sketch, mechanism) pairs (privstream.eval.arms) ------------------------------------------


PMG = Arm("PMG (Alg. 2)", "event", "alg1", "pmg")
PMG_STANDARD = Arm("PMG §5.1 (standard MG)", "event", "standard", "pmg_standard")
PURE_TOPK = Arm("Alg. 3 + Laplace(2/ε) top-k (§6)", "event", "alg1", "pure_topk", domain=True)
CHAN_TOPK = Arm("Chan Laplace(k/ε) top-k", "event", "standard", "chan_topk", domain=True)
CHAN_PMG = Arm("Chan Alg. 1 Geom(ε/(k+1))", "event", "standard", "chan_pmg", domain=True)
MERGED_GSHM = Arm("merged MG + GSHM", "merged", "merged", "gshm")
MERGED_LAPLACE = Arm("merged MG + thresholded Laplace(k/ε)", "merged", "merged", "laplace_threshold")
MERGED_CHAN = Arm("merged MG + Chan top-k", "merged", "merged", "chan_topk", domain=True)
DISJOINT_PMG = Arm("PMG per shard (release_disjoint)", "merged", "shards", "pmg", disjoint=True)
EXACT_THRESHOLD = Arm("exact + thresholded Laplace(1/ε)", "exact", "exact", "exact_threshold", domain=True)
PAMG_GSHM = Arm("PAMG + GSHM (Thm 8.12)", "user", "pamg", "gshm")
PAMG_MERGED_GSHM = Arm("merged PAMG + GSHM (Cor. 8.10)", "user", "pamg_merged", "gshm")
FLAT_PMG = Arm("flattened PMG, group privacy (Lemma 8.2)", "user", "flat", "pmg", group=True)

EVENT_ARMS = (PMG, PMG_STANDARD, PURE_TOPK, CHAN_TOPK, CHAN_PMG)
MERGED_ARMS = (MERGED_GSHM, MERGED_LAPLACE, MERGED_CHAN, DISJOINT_PMG)
EXACT_ARMS = (EXACT_THRESHOLD,)
USER_ARMS = (PAMG_GSHM, PAMG_MERGED_GSHM, FLAT_PMG)


# ---- settings -----------------------------------------------------------------------------------------

DEFAULTS = Settings(
    workloads=("zipf",),
    optional_workloads=("movielens", "flights"),
    ks=(16, 64, 256, 1024),
    epsilons=(0.25, 0.5, 1.0, 2.0),
    delta=1e-6,
    beta=0.05,
    reps=10,
)
TINY = Settings(
    workloads=("tiny",),
    ks=(8, 32),
    epsilons=(0.5, 1.0),
    reps=3,
    max_events=6_000,
    params={"m": "1,4,16", "shards": "2"},
)
DEFAULT_M = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Plan:
    """The resolved grid: (k, ε) cells of the event-level parts, k₀ and ε₀, the user-level m values
    (each run at ε₀ for every k > m), shard count and user-level repetitions."""

    cells: tuple[tuple[int, float], ...]
    k0: int
    eps0: float
    ms: tuple[int, ...]
    shards: int
    reps: int
    user_reps: int


def _middle(values: Sequence[Any], preferred: Any) -> Any:
    return preferred if preferred in values else sorted(values)[len(values) // 2]


def _plan(ctx: StudyContext) -> Plan:
    s = ctx.settings
    ks, eps = tuple(sorted(set(s.ks))), tuple(sorted(set(s.epsilons)))
    k0 = int(ctx.param("k0", str(_middle(ks, 256))))
    if k0 not in ks:
        raise ValueError(f"k0: must be one of the k values {ks}, got {k0}")
    try:
        eps0 = float(ctx.param("eps0", str(_middle(eps, 1.0))))
    except ValueError:
        raise ValueError(f"eps0: must be a number, got {ctx.param('eps0', '')!r}") from None
    if eps0 not in eps:
        raise ValueError(f"eps0: must be one of the epsilon values {eps}, got {eps0}")
    design = ctx.param("design", "cross")
    if design == "full":
        cells = tuple((k, e) for k in ks for e in eps)
    elif design == "cross":
        cells = tuple([(k, eps0) for k in ks] + [(k0, e) for e in eps if e != eps0])
    else:
        raise ValueError(f"design: must be 'cross' or 'full', got {design!r}")
    ms = ctx.int_list("m", DEFAULT_M)
    shards = ctx.int_list("shards", (4,))
    if len(shards) != 1 or shards[0] < 2:
        raise ValueError(f"shards: one shard count >= 2, got {ctx.param('shards', '')!r}")
    user_reps = ctx.int_list("user_reps", (s.reps,))[0]
    return Plan(cells, k0, eps0, ms, shards[0], s.reps, user_reps)


# ---- sketches -----------------------------------------------------------------------------------------


def _event_sketches(w: Workload, k: int, shards: int, truth: GroundTruth, rows: list[Row]) -> dict[str, Any]:
    """The event-level sketches of one (workload, k): Alg. 1, standard MG, the item-hashed shards
    (Alg. 1 each) and their merge; each timed into ``rows``."""
    alg1, standard = MisraGries(k), StandardMisraGries(k)
    rows.append(
        sketch_row(w.name, "alg1", k, None, alg1, w.n, timed(partial(alg1.update_batch, w.items)), truth)
    )
    seconds = timed(partial(standard.update_batch, w.items))
    rows.append(sketch_row(w.name, "standard", k, None, standard, w.n, seconds, truth))
    parts, seconds = shard_sketches(w, k, shards)  # by a hash of the item (Cor. 7.2)
    start = time.perf_counter()
    merged = merge_in_order(parts)
    seconds += time.perf_counter() - start
    rows.append(sketch_row(w.name, f"merged ({shards} shards)", k, None, merged, w.n, seconds, truth))
    return {"alg1": alg1, "standard": standard, "shards": parts, "merged": merged}


# ---- releases -----------------------------------------------------------------------------------------


def _pmg_on_merged_refusal(merged: Any, delta: float) -> str:
    """ "" if PMG on a merged sketch is (wrongly) accepted, else the refusal's text (§7)."""
    try:
        release(merged, Budget(1.0, delta), mechanism="pmg")
    except MechanismNotApplicable as exc:
        return str(exc)
    return ""


# ---- the study ----------------------------------------------------------------------------------------


def run(ctx: StudyContext) -> StudyOutput:
    """Run the lebeda-tetek study (module docstring)."""
    s, plan = ctx.settings, _plan(ctx)
    workloads = ctx.workloads()
    if not workloads:
        raise ValueError("workloads: none could be loaded")
    arms_event = [a for a in (*EVENT_ARMS, *MERGED_ARMS, *EXACT_ARMS) if not _note_missing(ctx, a)]
    arms_user = [a for a in USER_ARMS if not _note_missing(ctx, a)]
    user_cells = [(k, m) for k in sorted(set(s.ks)) for m in plan.ms if m < k]
    total = len(workloads) * (
        len(plan.cells) * len(arms_event) * plan.reps + len(user_cells) * len(arms_user) * plan.user_reps
    )
    warm_up()
    runs: list[Row] = []
    sketch_rows: list[Row] = []
    refusals: list[str] = []
    with ctx.progress(total, NAME, unit="release") as bar:
        for w in workloads:
            bar.set_postfix(w.name)
            truth = GroundTruth(w.items, top=s.top, gamma=s.gamma)
            exact = exact_sketch(w, truth, sketch_rows)
            by_k: dict[int, dict[str, Any]] = {}
            for k, eps in plan.cells:
                if k not in by_k:
                    by_k[k] = _event_sketches(w, k, plan.shards, truth, sketch_rows)
                    by_k[k]["exact"] = exact
                    refusals.append(_pmg_on_merged_refusal(by_k[k]["merged"], s.delta))
                sk = by_k[k]
                arms = [(a, sk[a.sketch]) for a in arms_event]
                run_arms(ctx, Cell(w, truth, k, eps), arms, plan.reps, runs, bar)
            by_k.clear()
            _user_level(ctx, w, plan, user_cells, arms_user, runs, sketch_rows, bar)
    coverage = [
        {c: row[c] for c in ("workload", "part", "arm", "mechanism", "runs", "covered", "beta")}
        for row in summarize(runs, ("workload", "part", "arm", "mechanism"))
    ]
    claims = _claims(ctx, plan, runs, sketch_rows, refusals)
    return StudyOutput(
        runs=runs,
        summary_by=("workload", "part", "arm", "mechanism", "sketch", "k", "epsilon", "m"),
        spread=("max_error", "max_error_vs_sketch", "topk_f1"),
        claims=claims,
        plots=_plots(plan, s.beta),
        tables={"sketches": sketch_rows, "coverage": coverage},
    )


def _note_missing(ctx: StudyContext, arm: Arm) -> bool:
    reason = unavailable(arm)
    if reason:
        ctx.note(f"arm {arm.label!r} skipped: {reason}")
    return bool(reason)


def _user_level(
    ctx: StudyContext,
    w: Workload,
    plan: Plan,
    cells: Sequence[tuple[int, int]],
    arms: Sequence[Arm],
    runs: list[Row],
    sketch_rows: list[Row],
    bar: Any,
) -> None:
    """§8: PAMG (+ merged over user-hashed shards) + GSHM vs flattened PMG with group privacy."""
    for m in sorted({m for _, m in cells}):
        sets = user_sets(w, m)
        truth = GroundTruth(sets.items, top=ctx.settings.top, gamma=ctx.settings.gamma)
        shard_of = partition_for(sets.user_ids, plan.shards)  # by a hash of the user (Cor. 8.10)
        for k in sorted(k for k, mm in cells if mm == m):
            pamg, flat = PrivacyAwareMisraGries(k, m), MisraGries(k)
            n_items = int(sets.items.size)
            seconds = timed(partial(pamg.update_batch_flat, sets.items, sets.offsets))
            sketch_rows.append(sketch_row(w.name, "pamg", k, m, pamg, n_items, seconds, truth))
            seconds = timed(partial(flat.update_batch, sets.items))
            sketch_rows.append(sketch_row(w.name, "flattened alg1", k, m, flat, n_items, seconds, truth))
            parts = []
            for i in range(plan.shards):
                shard = sets.subset(shard_of == i)
                part = PrivacyAwareMisraGries(k, m)
                part.update_batch_flat(shard.items, shard.offsets)
                parts.append(part)
            merged = merge_in_order(parts)
            sketch_rows.append(
                sketch_row(
                    w.name, f"merged pamg ({plan.shards} shards)", k, m, merged, n_items, float("nan"), truth
                )
            )
            sketches = {"pamg": pamg, "pamg_merged": merged, "flat": flat}
            cell = Cell(w, truth, k, plan.eps0, m)
            run_arms(ctx, cell, [(a, sketches[a.sketch]) for a in arms], plan.user_reps, runs, bar)


# ---- claims -------------------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "n/a"


def _mean(rows: Sequence[Row], col: str) -> float:
    values = [float(r[col]) for r in rows if r.get(col) is not None and math.isfinite(float(r[col]))]
    return sum(values) / len(values) if values else float("nan")


def _by(rows: Sequence[Row], *cols: str) -> dict[tuple[Any, ...], list[Row]]:
    out: dict[tuple[Any, ...], list[Row]] = {}
    for r in rows:
        out.setdefault(tuple(r.get(c) for c in cols), []).append(r)
    return out


def _slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of log y against log x (the growth exponent)."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / var if var else float("nan")


def _coverage_claim(rows: Sequence[Row], beta: float, claim: str, source: str) -> Claim:
    if not rows:
        return Claim.skip(claim, source, "no runs of this arm")
    covered = int(sum(r["covered"] for r in rows))
    passed, text = coverage_verdict(covered, len(rows), beta)
    return Claim.check(claim, source, text, f">= 1-β = {1 - beta:g} (binomial test at 0.1 %)", passed)


def _claims(
    ctx: StudyContext, plan: Plan, runs: list[Row], sketches: list[Row], refusals: list[str]
) -> list[Claim]:
    beta = ctx.settings.beta
    arm = lambda a: select(runs, {"arm": a.label})  # noqa: E731
    ks = sorted(set(ctx.settings.ks))
    at_eps0 = lambda a: select(arm(a), {"epsilon": plan.eps0})  # noqa: E731
    claims = [
        _coverage_claim(
            arm(PMG),
            beta,
            "PMG: with probability >= 1-β, for all x, f̂(x) ∈ [f(x) − 2ln((k+1)/β)/ε − 1 − 2ln(3/δ)/ε − |S|/(k+1), "
            "f(x) + 2ln((k+1)/β)/ε] (privstream states the discrete §5.2 form of this interval)",
            "Thm 8 (Lemma 7, Fact 1); §5.2",
        ),
        _zero_keys_claim(arm(PMG)),
        _independent_of_k_claim(at_eps0(PMG), at_eps0(CHAN_TOPK), ks),
        _beats_chan_claim(arm(PMG), arm(CHAN_TOPK), arm(CHAN_PMG)),
        _threshold_growth_claim(at_eps0(PMG), at_eps0(MERGED_GSHM), at_eps0(MERGED_LAPLACE), ks),
        _standard_threshold_claim(at_eps0(PMG), at_eps0(PMG_STANDARD), ks),
        _pure_claim(arm(PURE_TOPK), at_eps0(PURE_TOPK), at_eps0(CHAN_TOPK), beta),
        _non_streaming_claim(arm(PMG), arm(EXACT_THRESHOLD)),
        _merged_pmg_claim(refusals),
        _chan_merge_claim(arm(CHAN_TOPK), arm(MERGED_CHAN)),
        _all_coverage_claim(runs, beta),
        _pamg_less_noise_claim(arm(PAMG_GSHM), arm(FLAT_PMG)),
        _crossover_claim(arm(PAMG_GSHM), arm(FLAT_PMG)),
        _pamg_independent_of_m_claim(arm(PAMG_GSHM), arm(FLAT_PMG)),
        _sketch_error_claim(sketches),
    ]
    return claims


def _zero_keys_claim(pmg: Sequence[Row]) -> Claim:
    claim = "PMG: if f(x) = 0 then f̂(x) = 0; it outputs at most k items"
    source = "Thm 8"
    if not pmg:
        return Claim.skip(claim, source, "no PMG runs")
    false_keys = int(sum(r["false_keys"] for r in pmg))
    over_k = max(r["released"] / r["k"] for r in pmg)
    return Claim.check(
        claim,
        source,
        f"{false_keys} released items with f = 0 in {len(pmg)} runs; max released/k = {over_k:.3f}",
        "0 items with f = 0; released/k <= 1",
        false_keys == 0 and over_k <= 1,
    )


def _independent_of_k_claim(pmg: Sequence[Row], chan: Sequence[Row], ks: Sequence[int]) -> Claim:
    claim = "PMG adds noise with magnitude independent of the size of the sketch (Chan et al.'s grows with k)"
    source = "Abstract; §1; Thm 8"
    if len(ks) < 2 or not pmg:
        return Claim.skip(claim, source, "needs PMG runs at two or more k", "")
    lo, hi = ks[0], ks[-1]
    col = "mean_noise_released"
    ratios, chan_ratios, thresholds = [], [], set()
    for (w,), rows in _by(pmg, "workload").items():
        ratios.append(_mean(select(rows, {"k": hi}), col) / _mean(select(rows, {"k": lo}), col))
        thresholds |= {r["threshold"] for r in rows}
        c = select(chan, {"workload": w})
        chan_ratios.append(_mean(select(c, {"k": hi}), col) / _mean(select(c, {"k": lo}), col))
    worst = max(ratios)
    return Claim.check(
        claim,
        source,
        f"PMG threshold at every k: {sorted(thresholds)}; mean |f̂ − c| of released items at k={hi} / k={lo}: "
        f"{_fmt(worst)} (Chan top-k: {_fmt(max(chan_ratios)) if chan_ratios else 'n/a'})",
        f"one threshold for all k, and the ratio <= 2 while k grows {hi // lo}x",
        len(thresholds) == 1 and worst <= 2,
    )


def _beats_chan_claim(pmg: Sequence[Row], chan_topk: Sequence[Row], chan_pmg: Sequence[Row]) -> Claim:
    claim = (
        "Chan et al. add noise of magnitude k/ε (the more accurate the sketch, the more noise); "
        "PMG's error is smaller for k >= some k*"
    )
    source = "§1; §4 (Chan et al. baseline)"
    if not pmg or not (chan_topk or chan_pmg):
        return Claim.skip(claim, source, "needs PMG and Chan runs")
    found: dict[str, list[str]] = {}
    ok, worst_ratio = True, float("inf")
    for (w, eps), rows in sorted(_by(pmg, "workload", "epsilon").items()):
        ks = sorted({r["k"] for r in rows})
        wins = []
        for k in ks:
            mine = _mean(select(rows, {"k": k}), "max_error")
            other = min(
                _mean(select(c, {"workload": w, "epsilon": eps, "k": k}), "max_error")
                for c in (chan_topk, chan_pmg)
                if c
            )
            wins.append(mine < other)
            if k == ks[-1]:
                worst_ratio = min(worst_ratio, other / mine)
        k_star = next((ks[i] for i in range(len(ks)) if all(wins[i:])), None)
        ok &= k_star is not None
        found.setdefault(w, []).append(f"ε={eps:g}: {k_star if k_star is not None else 'none'}")
    return Claim.check(
        claim,
        source,
        "k* by workload: "
        + "; ".join(f"{w} ({', '.join(v)})" for w, v in found.items())
        + f"; at the largest k Chan's max error is >= {_fmt(worst_ratio)}x PMG's",
        "a k* in the grid from which PMG's mean max error < both Chan baselines', for every workload and ε",
        ok,
    )


def _threshold_growth_claim(
    pmg: Sequence[Row], gshm: Sequence[Row], laplace: Sequence[Row], ks: Sequence[int]
) -> Claim:
    claim = (
        "GSHM's threshold τ = O(√k·ln(k/δ)/ε) and thresholded Laplace's O(k·log(k/δ)/ε) grow with k, "
        "PMG's 1 + 2ln(3/δ)/ε does not"
    )
    source = "Thm 8.12; §1 (Böhler–Kerschbaum corrected); Alg. 2"
    if len(ks) < 2 or not (pmg and gshm and laplace):
        return Claim.skip(claim, source, "needs PMG, merged GSHM and Laplace runs at two or more k")

    def curve(rows: Sequence[Row]) -> list[tuple[float, float]]:
        return sorted((float(k), _mean(rs, "threshold")) for (k,), rs in _by(rows, "k").items())

    slopes = {
        name: _slope(curve(rows)) for name, rows in (("PMG", pmg), ("GSHM", gshm), ("Laplace", laplace))
    }
    increasing = all(
        all(b[1] > a[1] for a, b in zip(curve(rows), curve(rows)[1:], strict=False))
        for rows in (gshm, laplace)
    )
    ok = (
        slopes["PMG"] == 0 and 0.3 <= slopes["GSHM"] <= 0.9 and 0.8 <= slopes["Laplace"] <= 1.3 and increasing
    )
    return Claim.check(
        claim,
        source,
        "log-log slope of threshold vs k: " + ", ".join(f"{n} {_fmt(v)}" for n, v in slopes.items()),
        "PMG 0; GSHM in [0.3, 0.9] (√k·log); Laplace in [0.8, 1.3] (k·log); both strictly increasing",
        ok,
    )


def _standard_threshold_claim(pmg: Sequence[Row], standard: Sequence[Row], ks: Sequence[int]) -> Claim:
    claim = "A standard MG sketch (zero counters removed) needs the larger threshold 1 + 2ln((k+1)/(2δ))/ε"
    source = "§5.1"
    if not pmg or not standard:
        return Claim.skip(claim, source, "needs PMG and pmg_standard runs")
    pairs = [
        (k, _mean(select(pmg, {"k": k}), "threshold"), _mean(select(standard, {"k": k}), "threshold"))
        for k in ks
    ]
    pairs = [p for p in pairs if math.isfinite(p[1]) and math.isfinite(p[2])]
    larger = all(b >= a for _, a, b in pairs) and bool(pairs) and pairs[-1][2] > pairs[-1][1]
    growing = all(later[2] >= earlier[2] for earlier, later in zip(pairs, pairs[1:], strict=False))
    return Claim.check(
        claim,
        source,
        "; ".join(f"k={k}: Alg. 1 {a:g} vs §5.1 {b:g}" for k, a, b in pairs),
        "§5.1 threshold >= Alg. 1's at every k (ceil may tie them for small k), > at the largest k; non-decreasing in k",
        larger and growing,
    )


def _pure_claim(pure_all: Sequence[Row], pure: Sequence[Row], chan: Sequence[Row], beta: float) -> Claim:
    claim = (
        "ε-DP with error n/(k+1) + O(log(d)/ε) after Alg. 3: noise of magnitude independent of k "
        "(Laplace(2/ε), vs Chan's k/ε)"
    )
    source = "§6 (Lemma 6.1, 6.2)"
    if not pure or not chan:
        return Claim.skip(claim, source, "needs pure_topk and chan_topk runs")
    covered, text = coverage_verdict(int(sum(r["covered"] for r in pure_all)), len(pure_all), beta)
    k_max = max(r["k"] for r in pure)
    spreads, below_chan, parts = [], True, []
    for (w,), rows in _by(pure, "workload").items():  # the bound depends on the domain size d
        bounds = sorted({r["noise_bound"] for r in rows})
        spreads.append(bounds[-1] / bounds[0])
        chan_bound = _mean(select(chan, {"workload": w, "k": k_max}), "noise_bound")
        below_chan &= _mean(select(rows, {"k": k_max}), "noise_bound") < chan_bound
        parts.append(f"{w}: {_fmt(bounds[0])}..{_fmt(bounds[-1])} (Chan at k={k_max}: {_fmt(chan_bound)})")
    return Claim.check(
        claim,
        source,
        f"interval coverage {text}; stated noise bound over k: " + "; ".join(parts),
        "coverage >= 1-β; per workload the noise bound varies <= 10 % over k and is below Chan's at the largest k",
        covered and max(spreads) <= 1.1 and below_chan,
    )


def _non_streaming_claim(pmg: Sequence[Row], exact: Sequence[Row]) -> Claim:
    claim = (
        "The maximum error coming from the noise is the same as the best known in the private "
        "non-streaming setting (exact histogram + threshold), up to a constant factor"
    )
    source = "Abstract; §1 (Thm 1)"
    if not pmg or not exact:
        return Claim.skip(claim, source, "needs PMG runs and the exact_threshold reference (ExactHistogram)")
    ratios = []
    for (w, k, eps), rows in _by(pmg, "workload", "k", "epsilon").items():
        ref = _mean(select(exact, {"workload": w, "k": k, "epsilon": eps}), "max_error")
        if math.isfinite(ref) and ref > 0:
            ratios.append(_mean(rows, "max_error_vs_sketch") / ref)
    if not ratios:
        return Claim.skip(claim, source, "no common cells")
    return Claim.check(
        claim,
        source,
        f"PMG max |f̂ − c| / exact reference max |f̂ − f|: {_fmt(min(ratios))}..{_fmt(max(ratios))} over {len(ratios)} cells",
        "ratio <= 4 in every cell",
        max(ratios) <= 4,
    )


def _merged_pmg_claim(refusals: Sequence[str]) -> Claim:
    claim = "We cannot run Algorithm 2 (PMG) on the merged sketch"
    source = "§7"
    if not refusals:
        return Claim.skip(claim, source, "no merged sketch built")
    accepted = sum(1 for r in refusals if not r)
    return Claim.check(
        claim,
        source,
        f"release(merged, mechanism='pmg') refused for {len(refusals) - accepted} of {len(refusals)} merged sketches",
        "refused every time (MechanismNotApplicable)",
        accepted == 0,
    )


def _chan_merge_claim(single: Sequence[Row], merged: Sequence[Row]) -> Claim:
    claim = "With a trusted aggregator, Chan et al.'s approach can handle merge operations without increasing error"
    source = "§1; §7 (Cor. 7.2)"
    if not single or not merged:
        return Claim.skip(claim, source, "needs Chan top-k runs on the single and the merged sketch")
    ratios, same_bound = [], True
    for (w, k, eps), rows in _by(merged, "workload", "k", "epsilon").items():
        base = select(single, {"workload": w, "k": k, "epsilon": eps})
        if base:
            ratios.append(_mean(rows, "max_error_vs_sketch") / _mean(base, "max_error_vs_sketch"))
            same_bound &= _mean(rows, "noise_bound") == _mean(base, "noise_bound")
    if not ratios:
        return Claim.skip(claim, source, "no common cells")
    return Claim.check(
        claim,
        source,
        f"merged / single max |f̂ − c|: {_fmt(min(ratios))}..{_fmt(max(ratios))}; stated bounds equal: {same_bound}",
        "equal stated bounds; measured ratio in [2/3, 3/2] in every cell",
        same_bound and all(2 / 3 <= r <= 1.5 for r in ratios),
    )


def _all_coverage_claim(runs: Sequence[Row], beta: float) -> Claim:
    claim = "Every release's stated error interval f(x) − below − S <= f̂(x) <= f(x) + above holds with probability >= 1-β"
    source = "Thm 8, Thm 8.12, §6, Chan et al. (privstream ErrorBound)"
    if not runs:
        return Claim.skip(claim, source, "no runs")
    worst: tuple[float, str] = (2.0, "")
    failed = []
    for (label,), rows in _by(runs, "arm").items():
        covered = int(sum(r["covered"] for r in rows))
        passed, _ = coverage_verdict(covered, len(rows), beta)
        worst = min(worst, (covered / len(rows), label))
        if not passed:
            failed.append(label)
    return Claim.check(
        claim,
        source,
        f"lowest coverage {worst[0]:.3f} ({worst[1]}); arms failing: {failed or 'none'}",
        f"every arm >= 1-β = {1 - beta:g} (binomial test at 0.1 %)",
        not failed,
    )


@dataclass(frozen=True)
class _UserCell:
    """One (workload, k, m) cell of §8: the mean measured max |f̂ − c| and released count, and the
    stated noise bound, of PAMG + GSHM (``pamg_*``) and of flattened PMG (``flat_*``)."""

    workload: str
    k: int
    m: int
    pamg_error: float
    flat_error: float
    pamg_bound: float
    flat_bound: float
    informative: bool  #: both release something on average (else both errors are the largest counter)


def _user_cells(pamg: Sequence[Row], flat: Sequence[Row]) -> list[_UserCell]:
    out = []
    for (w, k, m), rows in sorted(_by(pamg, "workload", "k", "m").items()):
        other = select(flat, {"workload": w, "k": k, "m": m})
        if other:
            out.append(
                _UserCell(
                    w,
                    k,
                    m,
                    _mean(rows, "max_error_vs_sketch"),
                    _mean(other, "max_error_vs_sketch"),
                    _mean(rows, "noise_bound"),
                    _mean(other, "noise_bound"),
                    _mean(rows, "released") >= 1 and _mean(other, "released") >= 1,
                )
            )
    return out


def _pamg_less_noise_claim(pamg: Sequence[Row], flat: Sequence[Row]) -> Claim:
    claim = "For many parameters PAMG can be released with less noise than the MG sketch (flattened, group privacy)"
    source = "Abstract; §8 (Thm 8.12 vs Lemma 8.2)"
    cells = _user_cells(pamg, flat)
    if not cells:
        return Claim.skip(claim, source, "needs PAMG + GSHM and flattened PMG runs")
    large = [c for c in cells if c.m >= 2 * math.sqrt(c.k)]
    small = [c for c in cells if c.m == 1]
    stated_ok = bool(large) and all(c.pamg_bound < c.flat_bound for c in large)
    stated_ok &= all(c.pamg_bound > c.flat_bound for c in small)
    measured = [c for c in large if c.informative]
    wins = [c for c in measured if c.pamg_error < c.flat_error]
    measured_ok = not measured or 2 * len(wins) >= len(measured)
    return Claim.check(
        claim,
        source,
        f"stated noise bound smaller for PAMG + GSHM in {sum(c.pamg_bound < c.flat_bound for c in cells)} of "
        f"{len(cells)} (k, m) cells, in all {len(large)} with m >= 2√k: {all(c.pamg_bound < c.flat_bound for c in large)}, "
        f"larger at m = 1: {all(c.pamg_bound > c.flat_bound for c in small)}; measured max |f̂ − c| smaller in "
        f"{len(wins)} of {len(measured)} cells with m >= 2√k where both release items",
        "stated bound: PAMG smaller in every cell with m >= 2√k (>= 1 such cell), flattened PMG smaller at m = 1 "
        "('many', not all); measured: PAMG smaller in at least half of those cells that release items",
        stated_ok and measured_ok,
    )


def _crossover(points: Sequence[tuple[int, float, float]]) -> float | None:
    """The m where PAMG's stated noise bound ``a`` falls below flattened PMG's ``b`` for good:
    log-linear interpolation of ln(a/b) against ln m across the last sign change; None if PAMG
    never stays below, or is below from the smallest m on (no crossover inside the grid)."""
    pts = sorted(points)
    if any(not (a > 0 and b > 0) for _, a, b in pts):
        return None
    d = [math.log(a / b) for _, a, b in pts]
    if d[-1] >= 0 or d[0] < 0:
        return None
    i = max(j for j in range(len(d) - 1) if d[j] >= 0)
    lo, hi = math.log(pts[i][0]), math.log(pts[i + 1][0])
    return math.exp(lo + (hi - lo) * d[i] / (d[i] - d[i + 1]))


def _crossover_claim(pamg: Sequence[Row], flat: Sequence[Row]) -> Claim:
    claim = "PAMG + GSHM (τ ∝ √k·ln(k/δ)/ε) beats flattened PMG (∝ m·ln(m/δ)/ε) when m ≳ √k"
    source = "§8 comparison (Thm 8.12, Lemma 8.2)"
    cells = _user_cells(pamg, flat)
    if not cells:
        return Claim.skip(claim, source, "needs PAMG + GSHM and flattened PMG runs")
    found, ratios = [], []
    groups: dict[int, dict[int, tuple[float, float]]] = {}
    for c in cells:  # the stated bounds depend on (k, m, ε, δ, β) only, not on the workload
        groups.setdefault(c.k, {})[c.m] = (c.pamg_bound, c.flat_bound)
    for k, by_m in sorted(groups.items()):
        points = [(m, a, b) for m, (a, b) in sorted(by_m.items())]
        m_star = _crossover(points)
        if m_star is None:
            found.append(f"k={k}: no crossover inside m ∈ [{points[0][0]}, {points[-1][0]}]")
            continue
        ratios.append(m_star / math.sqrt(k))
        found.append(f"k={k}: m* ≈ {m_star:.1f} = {ratios[-1]:.2f}√k")
    return Claim.check(
        claim,
        source,
        "; ".join(found),
        "crossover m* (where PAMG's stated noise bound drops below flattened PMG's, interpolated in log m) "
        "in [√k/2, 2√k] wherever the grid brackets it (at least once)",
        bool(ratios) and all(0.5 <= r <= 2 for r in ratios),
    )


def _pamg_independent_of_m_claim(pamg: Sequence[Row], flat: Sequence[Row]) -> Claim:
    claim = (
        "The ℓ2-sensitivity of the PAMG sketch is √k independent of m (MG's sensitivity scales linearly in m)"
    )
    source = "§1; Lemma 8.9; Lemma 8.7"
    if not pamg or not flat:
        return Claim.skip(claim, source, "needs PAMG + GSHM and flattened PMG runs")
    constant, slopes = True, []
    for (w, k), rows in _by(pamg, "workload", "k").items():
        constant &= len({r["noise_bound"] for r in rows}) == 1
        curve = sorted(
            (float(m), _mean(rs, "noise_bound"))
            for (m,), rs in _by(select(flat, {"workload": w, "k": k}), "m").items()
        )
        if len(curve) >= 2:
            slopes.append(_slope(curve))
    return Claim.check(
        claim,
        source,
        f"PAMG + GSHM stated noise bound constant in m at every k: {constant}; flattened PMG's log-log slope in m: "
        + (f"{_fmt(min(slopes))}..{_fmt(max(slopes))}" if slopes else "n/a"),
        "PAMG's bound constant in m; flattened PMG's slope >= 0.9",
        constant and bool(slopes) and min(slopes) >= 0.9,
    )


def _sketch_error_claim(sketches: Sequence[Row]) -> Claim:
    claim = "Every non-private estimate lies in [f(x) − n/(k+1), f(x)] (N/(k+1) merged, M/(k+1) for PAMG)"
    source = "Fact 1; Agarwal et al. merge (§7); Lemma 8.8, 8.11"
    if not sketches:
        return Claim.skip(claim, source, "no sketches built")
    over = max(r["sketch_over"] for r in sketches)
    ratio = max((r["sketch_under"] / r["sketch_term"]) if r["sketch_term"] else 0.0 for r in sketches)
    exact_under = max((r["sketch_under"] for r in sketches if not r["sketch_term"]), default=0.0)
    return Claim.check(
        claim,
        source,
        f"max over-count {over:g}; max under-count / S = {ratio:.3f} over {len(sketches)} sketches",
        "no over-count; under-count <= S",
        over == 0 and ratio <= 1 and exact_under == 0,
    )


# ---- plots --------------------------------------------------------------------------------------------


def _plots(plan: Plan, beta: float) -> tuple[PlotSpec, ...]:
    event = {"part": ("event", "merged", "exact"), "epsilon": plan.eps0}
    return (
        PlotSpec(
            "max_error_vs_k",
            x="k",
            y="max_error",
            series="arm",
            facet=("workload",),
            where=event,
            logx=True,
            logy=True,
            title=f"max error over the universe vs k (ε = {plan.eps0:g})",
            ylabel="max |f̂(x) − f(x)|",
        ),
        PlotSpec(
            "noise_error_vs_k",
            x="k",
            y="max_error_vs_sketch",
            series="arm",
            facet=("workload",),
            where=event,
            logx=True,
            logy=True,
            title=f"error added by the mechanism vs k (ε = {plan.eps0:g})",
            ylabel="max |f̂(x) − c(x)| (c = sketch)",
        ),
        PlotSpec(
            "noise_error_vs_epsilon",
            x="epsilon",
            y="max_error_vs_sketch",
            series="arm",
            facet=("workload",),
            where={"part": ("event", "merged", "exact"), "k": plan.k0},
            logx=True,
            logy=True,
            title=f"error added by the mechanism vs ε (k = {plan.k0})",
            ylabel="max |f̂(x) − c(x)|",
        ),
        PlotSpec(
            "noise_bound_vs_k",
            x="k",
            y="noise_bound",
            series="arm",
            facet=("workload",),
            where=event,
            logx=True,
            logy=True,
            title=f"stated noise bound max(below, above) vs k (ε = {plan.eps0:g})",
        ),
        PlotSpec(
            "topk_f1_vs_k",
            x="k",
            y="topk_f1",
            series="arm",
            facet=("workload",),
            where=event,
            logx=True,
            title=f"top-10 F1 vs k (ε = {plan.eps0:g})",
        ),
        PlotSpec(
            "user_level_vs_m",
            x="m",
            y="max_error_vs_sketch",
            series="arm",
            facet=("workload", "k"),
            where={"part": "user"},
            logx=True,
            logy=True,
            title=f"user level (§8): error added by the mechanism vs m (ε = {plan.eps0:g})",
            ylabel="max |f̂(x) − c(x)|",
        ),
        PlotSpec(
            "coverage",
            table="coverage",
            kind="bar",
            x="arm",
            y="covered",
            series="workload",
            title="fraction of runs inside the stated error interval",
            hline=1 - beta,
            hline_label="1 − β",
        ),
        PlotSpec(
            "throughput",
            table="sketches",
            kind="bar",
            x="sketch",
            y="events_per_s",
            series="workload",
            where={"k": (plan.k0, 1), "m": None},
            logy=True,
            title=f"sketch build throughput (events/s, k = {plan.k0})",
        ),
    )


register_study(
    NAME,
    run,
    "Lebeda & Tětek: PMG (Thm 8) vs §5.1, §6, Chan et al., merged GSHM/Laplace, exact reference; PAMG vs flattening (§8)",
    defaults=DEFAULTS,
    tiny=TINY,
)
