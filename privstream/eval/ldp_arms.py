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

import math
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
from privstream.noise.rng import RandomSource

TopK = list[tuple[int, float]]


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
    server = HgLdpServer(params, rng=server_rng)
    server.warm_up(items[:warm])
    server.start_statistics()
    client = make_client(params, rng=client_rng)
    stateless = scheme == "bgr"
    for v in items[warm:]:
        state = None if stateless else server.public_state()
        server.insert_output(client.randomise(v, state), state)
    return ArmResult(server.heavy_hitters(), server.size_bytes())


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
        memory = int(counts.nbytes)
    elif name == "hr":
        hr = HadamardResponse(epsilon, d, rng=rng)
        hr_agg = hr.new_aggregator()
        for v in items[warm:]:
            hr_agg.add_output(hr.randomise(v))
        estimates = hr_agg.estimate()
        memory = hr_agg.size_bytes()
    else:
        raise ValueError(f"name: unknown oracle {name!r}")
    return ArmResult(_top_of(estimates + warm_counts, k), memory)


def run_heavy_guardian(items: Sequence[int], k: int, rng: RandomSource) -> ArmResult:
    """Non-private HeavyGuardian (w = 1, λ_h = k, λ_l = 0) on the whole raw stream."""
    hg = HeavyGuardian(k, rng=rng)
    hg.warm_up(items)
    top = sorted(((item, float(c)) for item, c in hg.counts.items()), key=lambda t: (-t[1], t[0]))
    return ArmResult(top[:k], hg.size_bytes())


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


def memory_row(d: int, k: int) -> dict[str, float]:
    """Server memory (bytes) of each arm at domain size ``d`` (HG-LDP: the cells model; oracles:
    their count arrays, allocated here for real)."""
    row: dict[str, float] = {"d": d}
    for scheme in ("bgr", "dsr", "bdr", "cnr"):
        row[scheme] = HgLdpServer(HgLdpParams(scheme, 1.0, d, k)).size_bytes()
    row["heavyguardian"] = HeavyGuardian(k).size_bytes()
    row["grr"] = int(GeneralizedRandomizedResponse(1.0, d).new_aggregator().counts.nbytes)
    row["hr"] = HadamardResponse(1.0, d).new_aggregator().size_bytes()
    return row
