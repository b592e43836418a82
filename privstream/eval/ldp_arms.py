"""The arms of the ``hg-ldp`` study and its top-k metrics (HG-LDP paper §6.2–§6.3).

Each arm runs over one stream of item indices ``0..d−1`` whose first ``warm`` items are the warm-up
(paper §6.1; raw, as in the released code) and returns its published top-k with estimates:

* the four HG-LDP schemes (client randomiser + HeavyGuardian server, :mod:`privstream.ldp`);
* the memory-unlimited oracles GRR and HR on the statistics part, plus the exact warm-up counts
  (every arm gets the same warm-up, paper §6.3);
* non-private HeavyGuardian (w = 1, λ_h = k, λ_l = 0) on the whole raw stream.

Metrics (paper §6.2, App. A.6): Precision = |published ∩ true top-k|/k; NDCG with rel_i = k − |i − i′| for a
published item at rank i whose true rank is i′ (0 if it is not a true top-k item), normalised by
the exact list's DCG; AAE = mean over the *true* top-k of |f̂ − f| with f̂ = 0 for items not
published (estimates are already clamped at 0).
"""

from __future__ import annotations

import gc
import math
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privstream.ldp import (
    GeneralizedRandomizedResponse,
    HadamardResponse,
    HeavyGuardian,
    HgLdpParams,
    HgLdpServer,
    make_client,
)
from privstream.ldp.randomiser import LocalRandomiser
from privstream.noise.rng import CryptoRandomSource, RandomSource, SeededRandomSource

TopK = list[tuple[int, float]]

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_NOT_SERVER = (CryptoRandomSource, SeededRandomSource, LocalRandomiser)


def deep_size(root: object) -> int:
    """Bytes of every object reachable from ``root`` (``sys.getsizeof`` over ``gc.get_referents``,
    each object once; a NumPy array counts its own buffer). Not counted: classes, modules,
    functions, random sources, and the client-side randomiser an oracle's aggregator refers to.
    The same measure for every arm (docs/eval.md, "Memory"), so "flat in d" can fail."""
    seen: set[int] = set()
    total, stack = 0, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SHARED) or isinstance(obj, _NOT_SERVER):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


@dataclass(frozen=True)
class ArmResult:
    """An arm's published top-k (item, estimate), largest first, and its server memory (bytes)."""

    top: TopK
    memory_bytes: int


def run_scheme(
    scheme: str,
    items: Sequence[int],
    warm: int,
    d: int,
    k: int,
    epsilon: float,
    server_rng: RandomSource,
    client_rng: RandomSource,
) -> ArmResult:
    """One HG-LDP scheme: raw warm-up, then every statistics item randomised against the current
    public state and inserted with that state (the sequential simulation of the paper)."""
    params = HgLdpParams(scheme, epsilon, d, k)  # type: ignore[arg-type]
    # Every report here uses the latest state, so no older version is kept (max_lag = 0).
    server = HgLdpServer(params, max_lag=0, rng=server_rng)
    server.warm_up(items[:warm])
    server.start_statistics()
    client = make_client(params, rng=client_rng)
    stateless = scheme == "bgr"
    for v in items[warm:]:
        state = None if stateless else server.public_state()
        server.insert_output(client.randomise(v, state), state)
    return ArmResult(server.heavy_hitters(), deep_size(server))


def _top_of(estimates: np.ndarray, k: int) -> TopK:
    order = np.lexsort((np.arange(estimates.size), -estimates))[:k]
    return [(int(i), max(0.0, float(estimates[i]))) for i in order]


def run_oracle(
    name: str, items: Sequence[int], warm: int, d: int, k: int, epsilon: float, rng: RandomSource
) -> ArmResult:
    """GRR or HR on the statistics items, plus the exact warm-up counts; top-k of all d estimates."""
    warm_counts = np.bincount(np.asarray(items[:warm], dtype=np.int64), minlength=d).astype(np.float64)
    if name == "grr":
        grr = GeneralizedRandomizedResponse(epsilon, d, rng=rng)
        grr_agg = grr.new_aggregator()
        counts = grr_agg.counts
        for v in items[warm:]:
            counts[grr.randomise_index(v)] += 1
        estimates = grr.estimate_counts(counts, len(items) - warm)
        memory = deep_size(grr_agg)
    elif name == "hr":
        hr = HadamardResponse(epsilon, d, rng=rng)
        hr_agg = hr.new_aggregator()
        for v in items[warm:]:
            hr_agg.add_output(hr.randomise(v))
        estimates = hr_agg.estimate()
        memory = deep_size(hr_agg)
    else:
        raise ValueError(f"name: unknown oracle {name!r}")
    return ArmResult(_top_of(estimates + warm_counts, k), memory)


def run_heavy_guardian(items: Sequence[int], k: int, rng: RandomSource) -> ArmResult:
    """Non-private HeavyGuardian (w = 1, λ_h = k, λ_l = 0) on the whole raw stream."""
    hg = HeavyGuardian(k, rng=rng)
    hg.warm_up(items)
    top = sorted(((item, float(c)) for item, c in hg.counts.items()), key=lambda t: (-t[1], t[0]))
    return ArmResult(top[:k], deep_size(hg))


def true_top(items: np.ndarray, d: int, k: int) -> tuple[list[int], np.ndarray]:
    """The exact top-k items (ties by smaller index) and every item's count."""
    counts = np.bincount(items, minlength=d)
    order = np.lexsort((np.arange(d), -counts))[:k]
    return [int(i) for i in order], counts


def precision(top: TopK, truth: list[int]) -> float:
    return len({item for item, _ in top} & set(truth)) / len(truth)


def ndcg(top: TopK, truth: list[int]) -> float:
    """NDCG with rel_i = k − |i − i′| (paper App. A.6); 1 for the exact list, 0 for a disjoint one."""
    k = len(truth)
    rank = {item: i for i, item in enumerate(truth)}
    dcg = sum(
        (k - abs(i - rank[item])) / math.log2(i + 2) for i, (item, _) in enumerate(top[:k]) if item in rank
    )
    ideal = sum(k / math.log2(i + 2) for i in range(k))
    return dcg / ideal


def aae(top: TopK, truth: list[int], counts: np.ndarray) -> float:
    """Mean over the true top-k of |f̂ − f| (f̂ = 0 if not published)."""
    published = dict(top)
    return sum(abs(published.get(item, 0.0) - float(counts[item])) for item in truth) / len(truth)


def memory_row(d: int, k: int, *, reports: int = 4000) -> dict[str, float]:
    """Server memory (bytes, :func:`deep_size`) of each arm at domain size ``d`` after the same
    stream: 10 % raw warm-up, then ``reports`` reports at ε = 1 (Normal around d/2, σ = 10, seeded)."""
    rnd = np.random.default_rng(0)
    n = reports + reports // 9
    items = [int(v) for v in np.clip(np.rint(rnd.normal(d / 2, 10, n)), 0, d - 1)]
    warm = n - reports
    row: dict[str, float] = {"d": d}
    for scheme in ("bgr", "dsr", "bdr", "cnr"):
        got = run_scheme(
            scheme, items, warm, d, k, 1.0, SeededRandomSource(f"m-{scheme}"), SeededRandomSource("m-c")
        )
        row[scheme] = got.memory_bytes
    row["heavyguardian"] = run_heavy_guardian(items, k, SeededRandomSource("m-hg")).memory_bytes
    for oracle in ("grr", "hr"):
        row[oracle] = run_oracle(
            oracle, items, warm, d, k, 1.0, SeededRandomSource(f"m-{oracle}")
        ).memory_bytes
    return row
