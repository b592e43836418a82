"""The practical variants of Chan, Li, Shi, Xu's experiments ("Differentially Private Continual
Monitoring of Heavy Hitters from Distributed Streams", §5 "Practical Optimization"). None is a
default: PCC, PDCH-LU and PDCH-BF run the theory unless a caller builds these classes explicitly.

(a) **Daily leaves** (:class:`LeafWindow`): no tree. Every time step is one leaf block; its items
    (any number, :meth:`LeafWindow.step_items`) go into one count vector, which is released once with
    PMG's clamp-and-top-β rule, and the window estimate is the sum of the W most recent leaf releases.
    An event lies in exactly one leaf and the leaves hold disjoint data, so by parallel composition
    each leaf may spend the whole leaf budget: the transcript is ε-DP if every leaf release is (no
    ε/2^(ℓ−i+1) split as in PCC). Lost: PCC's O(log(1/λ)) blocks per window (the window sums W noisy
    leaves, so the noise and the clamping bias add up W times) and Lemma 3's utility bound.
(b) **Estimated window size** (``count_fraction``): each node also releases its per-step item count
    with Geom(exp(ε_2)) = discrete Laplace(1/ε_2) noise; the paper splits ε_1 = 9ε/10 for the leaves,
    ε_2 = ε/10 for the count. The noisy sum over the window replaces W in PDCH-LU's thresholds and the
    aggregator's bar and fractions (:class:`LeafLazyUpdateNode`, :class:`LeafLazyUpdateAggregator`).
    A step's count has sensitivity 1 when one event is added or removed and 0 when one is replaced,
    so it costs ε_2 (add/remove) or nothing (replace). Thresholds computed from released counts are
    post-processing, so privacy holds; lost: the thresholds are no longer data-independent constants,
    and their accuracy is that of the noisy count.
(c) **Calibration** (:class:`Calibration`) of a leaf's noise:

    * ``MG`` (the theory, Lemma 2): the leaf's Misra–Gries core with β = ⌈2/λ⌉ counters and
      Geom(exp(ε_1/(β+1))): ε_1-DP for a replaced (≤ β+1) or an added/removed (≤ β) event.
    * ``EXACT``: the leaf's count vector is the exact histogram over the declared universe (what MG
      computes whenever β ≥ |U|, so no decrement can ever happen), with Geom(exp(ε_1/Δ)), Δ = 2 for a
      replaced event and Δ = 1 for an added/removed one (the ℓ1 sensitivity of a histogram); the
      top-β pruning is post-processing. This is the paper's "O(1) sensitivity" made a proof: under
      add/remove it is exactly the paper's Geom(e^{ε_1}). It costs memory O(distinct items per step)
      instead of O(β).
    * ``HEURISTIC``: the paper's shortcut as printed: a β-counter MG core with Geom(exp(ε_1)), on the
      empirical observation that no leaf exceeded β distinct items. **No DP guarantee**: whether MG
      decrements depends on the data (then one event moves up to β+1 counters), and under the
      paper's own replacement relation even an exact histogram has sensitivity 2
      (:attr:`LeafParams.guarantee` says "not private").

Bloom tables per leaf (PDCH-BF with daily leaves) are the same per-block construction as
:mod:`privstream.continual.pdch_bf`, one block per step; ``privstream eval chan`` evaluates them on
the aggregator's decoded sums (no state format or masked node class for the variants yet).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Unpack

import numpy as np

from privstream.accounting.budget import exact_value
from privstream.continual.blocks import check_lambda
from privstream.continual.lazy_update import LazyUpdateAggregator, LazyUpdateNode
from privstream.continual.pcc import NOT_PRIVATE, ContinualGuarantee, NoiseOptions, heavy_hitter_bar
from privstream.mechanisms.domain_topk import DeclaredDomain, Domain, declared_domain, noisy_top_k
from privstream.noise import discrete_laplace
from privstream.noise.rng import KeyedRandomSource, RandomSource, new_noise_key
from privstream.privacy import Change, Scope, Unit
from privstream.sketches import Item, StandardMisraGries, item_order_key, normalize_item
from privstream.validation import check_int

#: The paper's budget split for (b): ε_2 = ε/10 for the per-step counts, ε_1 = 9ε/10 for the leaves.
PAPER_COUNT_FRACTION = Fraction(1, 10)

NO_GUARANTEE = (
    "HEURISTIC, NO DP GUARANTEE: the paper's Geom(e^eps1) on a beta-counter MG leaf assumes no MG "
    "decrement (data-dependent) and sensitivity 1 (add/remove only); unproven"
)


class Calibration(StrEnum):
    """How a leaf's noise is calibrated (module docstring, item (c))."""

    MG = "mg"
    EXACT = "exact"
    HEURISTIC = "heuristic"


@dataclass(frozen=True)
class LeafParams:
    """Public parameters of the daily-leaves variant: ε, λ (β = ⌈2/λ⌉; not rounded, there is no
    tree), the window W in steps, the :class:`Calibration`, the neighbour relation (``change``) and
    the share of ε spent on the per-step counts (0: no count release)."""

    epsilon: Fraction
    lam: Fraction
    window: int
    calibration: Calibration = Calibration.MG
    change: Change = Change.REPLACE
    count_fraction: Fraction = Fraction(0)

    @property
    def beta(self) -> int:
        """β = ⌈2/λ⌉ kept values per leaf (PMG line 2)."""
        return math.ceil(2 / self.lam)

    @property
    def leaf_epsilon(self) -> Fraction:
        """ε_1 = ε(1 − count_fraction)."""
        return self.epsilon * (1 - self.count_fraction)

    @property
    def count_epsilon(self) -> Fraction | None:
        """ε_2 = ε·count_fraction (None: no count release)."""
        return self.epsilon * self.count_fraction if self.count_fraction else None

    @property
    def sensitivity(self) -> int:
        """The ℓ1 sensitivity the leaf noise is calibrated for (HEURISTIC: the paper's assumed 1)."""
        if self.calibration is Calibration.MG:
            return self.beta + 1
        if self.calibration is Calibration.EXACT:
            return self.change.steps  # 2 for a replacement, 1 for add/remove
        return 1

    @property
    def scale(self) -> Fraction:
        """The leaf noise's discrete Laplace scale Δ/ε_1 (Geom(exp(ε_1/Δ)), Def. 7)."""
        return self.sensitivity / self.leaf_epsilon

    def guarantee(self, noiseless: bool = False) -> ContinualGuarantee:
        """The whole transcript's guarantee (leaves and counts); not private if noiseless or HEURISTIC."""
        if noiseless or self.calibration is Calibration.HEURISTIC:
            epsilon, theorem = None, NOT_PRIVATE if noiseless else NO_GUARANTEE
        else:
            count = self.count_epsilon if self.change is Change.ADD_REMOVE else None
            epsilon = self.leaf_epsilon + (count or 0)
            theorem = (
                f"daily leaves (Chan-Li-Shi-Xu §5): each event lies in one leaf; each leaf is "
                f"eps1-DP ({self.calibration.value}: sensitivity {self.sensitivity}); parallel "
                "composition over disjoint leaves; per-step counts with Geom(e^eps2) cost eps2 under "
                "add/remove, 0 under replacement"
            )
        relation = (
            "replace one item of one time step" if self.change is Change.REPLACE else "add or remove one item"
        )
        return ContinualGuarantee(
            epsilon=epsilon,
            delta=Fraction(0),
            unit=Unit.EVENT,
            change=self.change,
            scope=Scope.ONE_STREAM,
            neighbour_relation=f"{relation} of this stream; steps cut by data-independent punctuations",
            privacy_unit="one event (one item at one time step) of one node's stream",
            theorem=theorem,
        )


def leaf_params(
    epsilon: object,
    lam: object,
    window: object,
    calibration: Calibration | str = Calibration.MG,
    change: Change = Change.REPLACE,
    count_fraction: object = 0,
) -> LeafParams:
    """Validated :class:`LeafParams`; ValueError naming the bad parameter."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | Fraction) or epsilon <= 0:
        raise ValueError(f"epsilon: must be a number > 0, got {epsilon!r}")
    if isinstance(count_fraction, bool) or not isinstance(count_fraction, int | float | Fraction):
        raise ValueError(f"count_fraction: must be a number in [0, 1), got {count_fraction!r}")
    share = exact_value(count_fraction)
    if not 0 <= share < 1:
        raise ValueError(f"count_fraction: must lie in [0, 1), got {count_fraction}")
    if not isinstance(change, Change):
        raise ValueError(f"change: must be a privstream.privacy.Change, got {change!r}")
    return LeafParams(
        epsilon=exact_value(epsilon),
        lam=check_lambda(lam),
        window=check_int("window", window, type_error=ValueError),
        calibration=Calibration(calibration),
        change=change,
        count_fraction=share,
    )


def top_values(values: Mapping[Item, int], beta: int, rng: RandomSource) -> dict[Item, int]:
    """The ``beta`` largest positive values; ties at the boundary broken uniformly at random. The
    top-β of a release that kept β' ≥ β values of the same noisy vector has exactly the law of the
    release that keeps β (PMG lines 19–22), so a caller may derive a sparser release from a denser
    one with the same noise scale."""
    positive = sorted(((v, x) for x, v in values.items() if v > 0), key=lambda p: -p[0])
    if len(positive) <= beta:
        return {x: v for v, x in positive}
    bar = positive[beta - 1][0]
    above = [(v, x) for v, x in positive if v > bar]
    tied = [x for v, x in positive if v == bar]
    for i in range(beta - len(above)):  # partial Fisher–Yates: a uniform subset of the ties
        j = i + rng.randbelow(len(tied) - i)
        tied[i], tied[j] = tied[j], tied[i]
    out = {x: v for v, x in above}
    out.update(dict.fromkeys(tied[: beta - len(above)], bar))
    return out


def _naive_limit(domain: DeclaredDomain, beta: int, scale: Fraction) -> int:
    """When :func:`noisy_top_k` should sample every element: its fast path generates each noise-only
    value it needs with exact order statistics (about 15 plain draws each), so it only pays when
    it needs few (small β, or few positive values). Both paths have the same output law."""
    positive_share = 1 / (math.exp(1 / float(scale)) + 1)  # Pr[noise >= 1] (Def. 7)
    needed = min(beta, domain.size * positive_share)
    return domain.size if 15 * needed > domain.size else 2048


class LeafWindow:
    """Variant (a) (with (b) if ``params.count_fraction``): one released leaf per time step, the
    window estimate the sum of the last W leaves. Stands in for PCC under :class:`LeafLazyUpdateNode`.

    ``domain``: the declared universe (required unless ``noiseless``). Noise options as for
    :class:`~privstream.continual.pcc.PCC`: ``noise_key`` (per-leaf keyed sources, a fresh CSPRNG key
    by default), ``rng`` (TESTS and seeded evaluations only), ``noiseless`` (NOT PRIVATE)."""

    def __init__(
        self, params: LeafParams, domain: Domain | None = None, **options: Unpack[NoiseOptions]
    ) -> None:
        noiseless = options.get("noiseless", False)
        rng, key = options.get("rng"), options.get("noise_key")
        if domain is None and not noiseless:
            raise ValueError("domain: the leaves add noise to every element of a declared universe; give one")
        if rng is not None and key is not None:
            raise ValueError("rng: give either an injected source or a noise_key, not both")
        self.params = params
        self.noiseless = noiseless
        self._domain = None if domain is None else declared_domain(domain)
        self._rng = rng
        self._key = None if noiseless or rng is not None else key or new_noise_key()
        self._t = 0
        self._leaves: deque[dict[Item, int]] = deque()
        self._counts: deque[int] = deque()
        self._total: dict[Item, int] = {}
        self.last_count: int | None = None  #: the count released at the last step (None: no counts)
        self.max_distinct = 0  #: the most distinct items one leaf held (monitoring; never released)

    @property
    def t(self) -> int:
        return self._t

    @property
    def guarantee(self) -> ContinualGuarantee:
        return self.params.guarantee(self.noiseless)

    def _source(self, what: str, digest: str) -> RandomSource:
        if self._rng is not None:
            return self._rng
        assert self._key is not None
        p = self.params
        context = (
            f"privstream leaf {what} t {self._t} epsilon {p.epsilon} lambda {p.lam} window {p.window} "
            f"calibration {p.calibration.value} change {p.change.value} share {p.count_fraction} data {digest}"
        )
        return KeyedRandomSource(self._key, context)

    def _counts_of(self, xs: list[Item]) -> dict[Item, int]:
        p = self.params
        if p.calibration is Calibration.EXACT:
            dom = self._domain
            return dict(Counter(x for x in xs if dom is None or dom.position(x) is not None))
        core = StandardMisraGries(p.beta)
        core.update_batch(xs)  # exactly item by item
        return core.counters()

    def release(self, counts: Mapping[Item, int]) -> dict[Item, int]:
        """One leaf's release of its count vector: noiseless, the in-universe counts; else noise on
        every universe element at :attr:`LeafParams.scale`, clamp at 0, keep the β largest."""
        dom = self._domain
        if self.noiseless:
            return {x: c for x, c in counts.items() if c and (dom is None or dom.position(x) is not None)}
        assert dom is not None
        p = self.params
        digest = hashlib.sha256(repr(sorted(counts.items(), key=lambda kv: item_order_key(kv[0]))).encode())
        limit = _naive_limit(dom, p.beta, p.scale)
        rng = self._source("values", digest.hexdigest())
        return dict(noisy_top_k(counts, dom, p.beta, p.scale, rng, min_value=1, naive_limit=limit))

    def step_items(self, items: Sequence[object] | np.ndarray) -> dict[Item, int]:
        """One time step: release its leaf (and its noisy count, :attr:`last_count`), slide the
        window; returns the leaf's released values."""
        xs = [normalize_item(x) for x in items]
        self._t += 1
        counts = self._counts_of(xs)
        self.max_distinct = max(self.max_distinct, len(set(xs)))
        leaf = self.release(counts)
        eps2 = self.params.count_epsilon
        if eps2 is not None:
            noise = 0 if self.noiseless else discrete_laplace(1 / eps2, self._source("count", str(len(xs))))
            self.last_count = len(xs) + noise
            self._counts.append(self.last_count)
        self._push(leaf)
        return leaf

    def _push(self, leaf: dict[Item, int]) -> None:
        total = self._total
        self._leaves.append(leaf)
        for x, v in leaf.items():
            total[x] = total.get(x, 0) + v
        if len(self._leaves) > self.params.window:
            for x, v in self._leaves.popleft().items():
                left = total[x] - v
                if left:
                    total[x] = left
                else:
                    del total[x]
        if len(self._counts) > self.params.window:
            self._counts.popleft()

    @property
    def last_leaf(self) -> dict[Item, int]:
        """The leaf released at the last step ({} before the first)."""
        return dict(self._leaves[-1]) if self._leaves else {}

    def estimates(self) -> dict[Item, int]:
        """The window estimate: Σ of the last W leaf releases, positive entries, in item order."""
        return {x: self._total[x] for x in sorted(self._total, key=item_order_key) if self._total[x] > 0}

    def window_size(self) -> int | None:
        """Σ of the released counts over the window (variant (b)); None without count releases."""
        return sum(self._counts) if self.params.count_epsilon is not None else None


class LeafLazyUpdateNode(LazyUpdateNode):
    """PDCH-LU (Alg. 2's rules) on :class:`LeafWindow` instead of PCC(ε, λ/11): the leaves use λ/11
    (β = ⌈22/λ⌉, Theorem 1's node parameter, not rounded since there is no tree). With counts
    (``params.count_fraction`` > 0) the thresholds' scale is the node's noisy window size (at least
    1), else ``window_items`` or W. Send :attr:`LeafWindow.last_count` (one word) with each step's
    messages. No state format (``to_bytes`` refuses)."""

    def __init__(
        self,
        params: LeafParams,
        domain: Domain | None = None,
        window_items: int | None = None,
        **options: Unpack[NoiseOptions],
    ) -> None:
        if window_items is not None and params.count_epsilon is not None:
            raise ValueError("window_items: the noisy window size replaces it; give one or the other")
        leaves = LeafWindow(
            LeafParams(
                params.epsilon,
                params.lam / 11,
                params.window,
                params.calibration,
                params.change,
                params.count_fraction,
            ),
            domain,
            **options,
        )
        self.leaves = leaves
        self._setup(params.lam, leaves, {}, 0, window_items)  # type: ignore[arg-type]

    def _advance(self, items: Sequence[object] | np.ndarray) -> None:
        self.leaves.step_items(items)
        size = self.leaves.window_size()
        if size is not None:
            self.set_scale(max(size, 1))

    @property
    def guarantee(self) -> ContinualGuarantee:
        return self.leaves.guarantee

    def to_bytes(self) -> bytes:
        raise NotImplementedError("the practical variants have no checkpoint format")


class LeafLazyUpdateAggregator(LazyUpdateAggregator):
    """PDCH-LU's aggregator with variant (b): it also takes each node's per-step noisy counts and uses
    their sum over the last W steps and all nodes in place of k·W (release bar and fractions)."""

    def __init__(self, k: object, lam: object, window: object) -> None:
        super().__init__(k, lam, window)
        self._steps: deque[int] = deque()
        self._current = 0

    def receive_count(self, node: int, count: int) -> None:
        """Node ``node``'s released count for the current step."""
        check_int("node", node, minimum=0, below=self.k, type_error=ValueError)
        self._current += int(count)

    def end_step(self) -> None:
        """Close the current step's counts (call once per step, after every node's count)."""
        self._steps.append(self._current)
        self._current = 0
        if len(self._steps) > self.window:
            self._steps.popleft()

    def window_total(self) -> int:
        """Σ over the last W steps and all nodes of the released counts (at least 1)."""
        return max(sum(self._steps), 1)

    def fractions(self) -> dict[Item, Fraction]:
        """c(x) / window_total(): the estimated fraction of every listed item."""
        total = self.window_total()
        return {x: Fraction(c, total) for x, c in self.counts().items()}

    def heavy_hitters(self, theta: object) -> set[Item]:
        """{x : c(x) >= (θ − λ)·window_total()}."""
        bar = heavy_hitter_bar(theta, self.lam, self.window_total())
        return {x for x, c in self.counts().items() if c >= bar}
