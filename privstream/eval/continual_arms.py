"""The arms of the ``chan`` study: Chan, Li, Shi, Xu's protocols run over sites and time steps, and
the paper's metrics (§5 "Experiments").

* :func:`run_leaves` — the paper's experimental setup: daily leaves with the estimated window size
  (:mod:`privstream.continual.variants`, (a) + (b)) under PDCH-LU and PDCH-BF, or their noiseless
  baselines DCH-LU and DCH-BF, one step per day, many items per step;
* :func:`run_theory` — the theory-faithful protocols (PCC's dyadic blocks, one item per step,
  Remark 1): :class:`~privstream.continual.LazyUpdateNode` and the masked
  :class:`~privstream.continual.PdchBfNode` / :class:`~privstream.continual.PdchBfAggregator`.

Error (§5): with H the items whose true fraction of the k-site window is >= θ and Ĥ those whose
estimated fraction is >= θ − λ, ℰ(x) = |true fraction − estimated fraction| over H ∪ Ĥ, its mean and
standard deviation per step (:func:`fraction_error`).

PDCH-BF with daily leaves: the masks of :mod:`privstream.continual.masking` cancel exactly in the
aggregator's sum (tested in ``tests/test_continual_pdch_bf.py``) and the Bloom table of a sum is the
sum of the tables, so the study builds each day's decoded table directly from the sum of the nodes'
leaf releases: with the paper's sizing (P = 8 rows, Q = ⌈e·D⌉ columns, D the most distinct items the
sites saw together in a day — the paper's data-dependent rule, which noise can overload), and with
Theorem 2's sizing, whose min-rule is exact for all items with probability >= 1 − δ and is taken as
exact here (its sizes only enter the communication table).
"""

from __future__ import annotations

import hashlib
import logging
import math
import struct
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privstream.continual import (
    PCC,
    LazyUpdateAggregator,
    LazyUpdateNode,
    PdchBfAggregator,
    PdchBfNode,
    Roster,
    pdch_bf_config,
)
from privstream.continual.bloom import BloomHashFamily
from privstream.continual.variants import (
    Calibration,
    LeafLazyUpdateAggregator,
    LeafLazyUpdateNode,
    LeafParams,
    LeafWindow,
    top_values,
)
from privstream.eval.results import Row
from privstream.eval.site_streams import SiteSteps
from privstream.noise.rng import RandomSource
from privstream.privacy import Change
from privstream.sketches import Item

logger = logging.getLogger(__name__)

PDCH_LU = "PDCH-LU"
PDCH_BF = "PDCH-BF (paper Bloom)"
PDCH_BF_EXACT = "PDCH-BF (Thm 2 Bloom)"
DCH_LU = "DCH-LU (noiseless)"
DCH_BF = "DCH-BF (noiseless, paper Bloom)"
MG_LU = "PDCH-LU, MG calibration"
MG_BF = "PDCH-BF (Thm 2 Bloom), MG calibration"

#: Source of seeded noise for one part of a run: ``rngs(part, site)``.
Sources = Callable[[str, int], RandomSource]


@dataclass(frozen=True)
class Setup:
    """One experiment's public parameters: θ, λ, the window W (steps), the leaves' calibration and
    neighbour relation, ε's share for the per-step counts, the paper-sized Bloom table (P, Q) and
    the public hash seed."""

    theta: Fraction
    lam: Fraction
    window: int
    calibration: Calibration
    change: Change
    count_fraction: Fraction
    bloom_rows: int
    bloom_columns: int
    hash_seed: bytes

    def leaf_params(self, epsilon: float) -> LeafParams:
        return LeafParams(
            Fraction(epsilon), self.lam, self.window, self.calibration, self.change, self.count_fraction
        )


def dense(values: Mapping[Item, int], domain: range) -> np.ndarray:
    """``values`` as a dense int64 vector over ``domain``."""
    out = np.zeros(len(domain), dtype=np.int64)
    if values:
        keys = np.fromiter(values.keys(), dtype=np.int64, count=len(values)) - domain.start
        out[keys] = np.fromiter(values.values(), dtype=np.int64, count=len(values))
    return out


def fraction_error(
    true_counts: np.ndarray, true_total: float, est: np.ndarray, est_total: float, theta: float, lam: float
) -> Row:
    """§5's error in estimated fraction over H ∪ Ĥ: mean, (population) sd and max of ℰ(x), |H ∪ Ĥ|,
    |H| and |Ĥ|."""
    true_f = true_counts / max(true_total, 1.0)
    est_f = est / max(est_total, 1.0)
    heavy, released = true_f >= theta, est_f >= theta - lam
    errors = np.abs(true_f - est_f)[heavy | released]
    nan = float("nan")
    return {
        "error_mean": float(errors.mean()) if errors.size else nan,
        "error_sd": float(errors.std()) if errors.size else nan,
        "error_max": float(errors.max()) if errors.size else nan,
        "error_max_all": float(np.abs(true_f - est_f).max()),
        "items": int(errors.size),
        "heavy": int(heavy.sum()),
        "released": int(released.sum()),
    }


class WindowSum:
    """The sum of the last ``window`` pushed dense vectors."""

    def __init__(self, window: int, size: int) -> None:
        self.window, self.total, self._parts = window, np.zeros(size, dtype=np.int64), deque[np.ndarray]()

    def push(self, vector: np.ndarray) -> None:
        self._parts.append(vector)
        self.total = self.total + vector
        if len(self._parts) > self.window:
            self.total = self.total - self._parts.popleft()


class DailyBloom:
    """Paper-sized Bloom tables, one public hash family per step (``seed ‖ step``), decoded by the
    min-rule (§4.2); the families' indices are computed once per step and shared by every arm."""

    def __init__(self, seed: bytes, rows: int, columns: int, domain: range) -> None:
        self.seed, self.rows, self.columns, self.domain = seed, rows, columns, domain
        self._indices: dict[int, np.ndarray] = {}

    def indices(self, step: int) -> np.ndarray:
        if step not in self._indices:
            family = BloomHashFamily.from_seed(self.seed + struct.pack(">Q", step), self.rows, self.columns)
            self._indices[step] = np.array([family.indices(x) for x in self.domain], dtype=np.int64).T
        return self._indices[step]

    def decode(self, step: int, summed: np.ndarray) -> np.ndarray:
        """min_p A[p][H_p(x)] for every domain element, A the table of ``summed`` (>= 0)."""
        idx = self.indices(step)
        table = np.zeros((self.rows, self.columns), dtype=np.int64)
        for p in range(self.rows):
            np.add.at(table[p], idx[p], summed)
        return np.min(np.take_along_axis(table, idx, axis=1), axis=0)


def _true_windows(data: SiteSteps, window: int) -> list[tuple[np.ndarray, int]]:
    """The true k-site window counts and size after every step."""
    win = WindowSum(window, len(data.domain))
    sizes: deque[int] = deque(maxlen=window)
    out = []
    for t in range(data.steps):
        win.push(data.histogram(t))
        sizes.append(int(data.counts(t).sum()))
        out.append((win.total, sum(sizes)))
    return out


def run_leaves(
    data: SiteSteps,
    setup: Setup,
    epsilon: float | None,
    rngs: Sources,
    bloom: DailyBloom,
    measure: int,
) -> tuple[list[Row], list[Row]]:
    """The daily-leaves protocols at ``epsilon`` (None: the noiseless DCH baselines) over every step;
    returns (error rows for the last ``measure`` steps, one row per node and step with its messages).

    With the EXACT or HEURISTIC calibration the leaf noise scale does not depend on β, so each node
    draws one release at PDCH-LU's β = ⌈22/λ⌉ and PDCH-BF's leaf is its top ⌈2/λ⌉ values
    (:func:`~privstream.continual.variants.top_values`: exactly the law of its own release); with MG
    the scales differ and PDCH-BF's leaves are drawn separately."""
    noiseless = epsilon is None
    params = setup.leaf_params(epsilon or 1.0)
    lu_label, bf_label = (DCH_LU, DCH_BF) if noiseless else (PDCH_LU, PDCH_BF)
    if setup.calibration is Calibration.MG:
        lu_label, bf_label = MG_LU, MG_BF
    own_bf = setup.calibration is Calibration.MG and not noiseless
    domain, k = data.domain, data.k
    nodes, bf_nodes = [], []
    for i in range(k):
        opts = {"noiseless": True} if noiseless else {"rng": rngs("lu", i)}
        nodes.append(LeafLazyUpdateNode(params, domain, **opts))
        if own_bf:
            bf_nodes.append(LeafWindow(params, domain, rng=rngs("bf", i)))
    ties = [rngs("bf-ties", i) for i in range(k)]
    agg = LeafLazyUpdateAggregator(k, setup.lam, setup.window)
    beta = params.beta
    exact_bf, paper_bf = WindowSum(setup.window, len(domain)), WindowSum(setup.window, len(domain))
    truth = _true_windows(data, setup.window)
    errors: list[Row] = []
    messages: list[Row] = []
    eps_value = None if epsilon is None else float(epsilon)
    for t in range(1, data.steps + 1):
        summed = np.zeros(len(domain), dtype=np.int64)
        for i, node in enumerate(nodes):
            sent = node.step_items(data.items[i][t - 1])
            agg.receive(i, sent)
            count = node.leaves.last_count
            agg.receive_count(i, 0 if count is None else count)
            if own_bf:
                leaf = bf_nodes[i].step_items(data.items[i][t - 1])
            elif noiseless:
                leaf = node.leaves.last_leaf
            else:
                leaf = top_values(node.leaves.last_leaf, beta, ties[i])
            summed += dense(leaf, domain)
            messages.append(
                {"arm": lu_label, "epsilon": eps_value, "step": t, "site": i, "messages": len(sent)}
            )
        agg.end_step()
        exact_bf.push(summed)
        if not own_bf:
            paper_bf.push(bloom.decode(t, summed))
        if t <= data.steps - measure:
            continue
        true_counts, true_total = truth[t - 1]
        est_total = float(agg.window_total())
        lu_est = dense(agg.counts(), domain)
        if own_bf:  # MG calibration: Theorem 2's Bloom only
            estimates = [(lu_label, lu_est), (bf_label, exact_bf.total)]
        elif noiseless:  # the exact decode would be the true counts: only the paper's Bloom
            estimates = [(lu_label, lu_est), (bf_label, paper_bf.total)]
        else:
            estimates = [(lu_label, lu_est), (PDCH_BF_EXACT, exact_bf.total), (bf_label, paper_bf.total)]
        for label, est in estimates:
            row: Row = {"arm": label, "epsilon": eps_value, "step": t}
            row.update(
                fraction_error(true_counts, true_total, est, est_total, float(setup.theta), float(setup.lam))
            )
            row["window_total_ratio"] = est_total / max(true_total, 1)
            errors.append(row)
    distinct = max(n.leaves.max_distinct for n in nodes)
    logger.info("run_leaves eps=%s: max distinct items in one leaf %d", epsilon, distinct)
    for row in errors:
        row["max_distinct_per_leaf"] = distinct
    return errors, messages


@dataclass(frozen=True)
class TheorySetup:
    """The theory-faithful run: ``k`` nodes with one item per step, universe ``range(n)``, window
    ``window`` steps, ``steps`` steps in all, θ, λ, the Bloom δ."""

    k: int
    n: int
    window: int
    steps: int
    theta: Fraction
    lam: Fraction
    delta: Fraction


def _keys(k: int, seed: int) -> dict[int, X25519PrivateKey]:
    """Deterministic X25519 keys for the evaluation only (a deployment uses generate_private_key)."""
    return {
        i: X25519PrivateKey.from_private_bytes(hashlib.sha256(f"eval-chan-{seed}-{i}".encode()).digest())
        for i in range(1, k + 1)
    }


def run_theory(
    streams: Sequence[np.ndarray],
    setup: TheorySetup,
    epsilon: float | None,
    rngs: Sources,
    seed: int,
    measure: int,
) -> tuple[list[Row], list[Row]]:
    """PDCH-LU (PCC(ε, λ/11) nodes) and PDCH-BF (PCC(ε, λ) nodes, masked Bloom tables, the real
    aggregator) with one item per step, or DCH-LU / DCH-BF if ``epsilon`` is None; returns (error
    rows for the last ``measure`` steps, per node and step LU message rows)."""
    noiseless = epsilon is None
    eps = 1.0 if epsilon is None else epsilon
    domain = range(setup.n)
    keys = _keys(setup.k, seed)
    roster = Roster.from_private_keys(keys)
    config = pdch_bf_config(
        eps,
        setup.lam,
        setup.window,
        domain,
        setup.k,
        setup.delta,
        f"eval-chan-hash-{seed}".encode(),
        f"eval-chan-{seed}-{epsilon}".encode(),
    )
    lu, bf = [], []
    for i, sk in keys.items():
        opts = {"noiseless": True} if noiseless else {"rng": rngs("theory-lu", i)}
        lu.append(LazyUpdateNode(eps, setup.lam, setup.window, domain, **opts))
        popts = {"noiseless": True} if noiseless else {"rng": rngs("theory-bf", i)}
        bf.append(PdchBfNode(i, sk, roster, config, PCC(eps, setup.lam, setup.window, domain, **popts)))
    lu_agg = LazyUpdateAggregator(setup.k, setup.lam, setup.window)
    bf_agg = PdchBfAggregator(roster, config)
    lu_label, bf_label = ("DCH-LU (noiseless)", "DCH-BF (noiseless)") if noiseless else ("PDCH-LU", "PDCH-BF")
    eps_value = None if epsilon is None else float(epsilon)
    errors: list[Row] = []
    messages: list[Row] = []
    total = setup.k * setup.window
    for t in range(1, setup.steps + 1):
        for i in range(setup.k):
            x = int(streams[i][t - 1])
            sent = lu[i].step(x)
            lu_agg.receive(i, sent)
            messages.append(
                {"arm": lu_label, "epsilon": eps_value, "step": t, "site": i, "messages": len(sent)}
            )
            for message in bf[i].step(x):
                bf_agg.receive(message)
        bf_agg.discard_expired(t)
        if t <= setup.steps - measure:
            continue
        true_counts = np.sum(
            [np.bincount(s[max(0, t - setup.window) : t], minlength=setup.n) for s in streams], axis=0
        )
        bf_est = bf_agg.estimates(t)
        for label, est in ((lu_label, dense(lu_agg.counts(), domain)), (bf_label, dense(bf_est, domain))):
            row: Row = {"arm": label, "epsilon": eps_value, "step": t}
            row.update(fraction_error(true_counts, total, est, total, float(setup.theta), float(setup.lam)))
            errors.append(row)
    return errors, messages


def theory_parameters(epsilon: float, lam: Fraction, window: int, items_per_step: float) -> list[Row]:
    """What the theory-faithful PCC is at a setting (one row per level): W_i, β_i, ε_i and the noise
    scale (β_i+1)/ε_i, next to the per-node λW in items (``items_per_step`` items per step)."""
    from privstream.continual import pcc_params

    p = pcc_params(epsilon, lam, window)
    return [
        {
            "epsilon": epsilon,
            "lam": float(lam),
            "lam_rounded": float(p.lam),
            "window": window,
            "w0": p.w0,
            "levels": p.levels + 1,
            "level": i,
            "block_steps": p.level_size(i),
            "used": p.level_size(i) <= window,
            "beta": p.level_beta(i),
            "level_epsilon": float(p.level_epsilon(i)),
            "noise_scale": float(p.level_scale(i)),
            "noise_sd": math.sqrt(2) * float(p.level_scale(i)),
            "lambda_w_items": float(lam) * window * items_per_step,
        }
        for i in range(p.levels + 1)
    ]
