"""Pre-flight utility check: will a job's releases be noise-dominated? From public parameters only.

Every job's noise is calibrated from its public parameters, never from the data, so before Flink
starts the launcher can compute the noise scale of a release and compare it with the counts the
user can hope to see in the declared epoch or window. :func:`preflight` ``(config) -> list[str]``
returns one warning per problem (empty: nothing to say), each naming the smallest change that fixes
it; :func:`warn_before_start` logs them at WARNING (the job still starts: the parameters are the
user's choice). One function per job:

* **heavy-hitters** (:func:`heavy_hitters`): the release's stated error bound
  (:attr:`privstream.mechanisms.Release.error_bound`) from the very release path of the job
  (:class:`~privstream.operators.release_logic.EpochReleaser` on empty shard sketches: calibration
  never sees the sketch, Lebeda–Tětek; in memory, nothing published). ``below`` is the *bar*: a
  count that surely passes the threshold (PMG: T − 1 + 2b, Thm 8). An epoch of N events per shard
  (count epochs) holds at most ⌊N/bar⌋ items of count ≥ bar; fewer than ``min(k, 10)`` means the
  releases are empty or nearly so. Time epochs declare no size: nothing to compare.
* **sliding-window** (:func:`sliding_window`): DPSW-Sketch (Wang–Wang–Chen KDD 2024) estimates sum
  the Count-Min queries of up to ⌈w/W⌉ + 1 PCMSs (Alg. 3), each counter with discrete Gaussian noise
  of variance a/ρ_j (Alg. 1; DPSW Lemma 4.1's split of ρ). The noise scale of one estimate is
  σ = √((L − 2)·a/ρ_1 + 2·a/min_j ρ_j) (whole substreams at ρ_1, the two partial ones at worst at
  the smallest ρ_j). Every queried item gets such noise, so the largest of D ≈ σ·√(2 ln D); a bar
  (γ − ζ)·n (Alg. 3 line 8, n = w or ``--window-items``) below it releases noise.
* **continual-monitor** (:func:`continual_monitor`): PCC (Chan–Li–Shi–Xu, Alg. 1 with Lemma 2's
  sensitivity β_i + 1) adds discrete Laplace noise of scale b_i = (β_i + 1)/ε_i to every universe
  item of every block; b_i is about the same at every level, so a window count summed over k nodes
  has noise of standard deviation at least σ = √(2k)·b_0, and the largest among the n universe
  items ≈ σ·√(2 ln n). The release bar is (θ − λ)·k·W′ (W′ = ``--window-items`` or W).
* **ldp-heavy-hitters** (:func:`ldp_heavy_hitters`): HG-LDP's estimate of an item's count from n
  reports (Li et al., arXiv 2311.16062) has the frequency oracle's standard deviation
  √(n·q(1 − q))/(p − q) (GRR, Wang et al. USENIX Security 2017, Eq. (2); BDR/CNR: Eq. (2) of HG-LDP
  with hit probability p1·q2 and denominator p1·(p2 − q2)); over an epoch of n = ``--epoch-reports``
  reports the k-th heaviest item has at most n/k reports, and a release holds the k heavy-part
  items' estimates, so σ·√(2 ln k) >= n/k is noise-dominated.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import lru_cache
from typing import Any

logger = logging.getLogger(__name__)

#: A heavy-hitters release that can show fewer than this many items (or k, if smaller) warns.
MIN_VISIBLE_ITEMS = 10


def preflight(config: Any) -> list[str]:
    """The warnings for any job's config (one line each; empty: the parameters look usable). The
    config's class is matched by name: the job modules import this one to call it, so it imports
    none of them (no import cycle among the job modules)."""
    checks: dict[str, Callable[[Any], list[str]]] = {
        "HeavyHittersConfig": heavy_hitters,
        "SlidingWindowConfig": sliding_window,
        "ContinualConfig": continual_monitor,
        "LdpJobConfig": ldp_heavy_hitters,
    }
    check = checks.get(type(config).__name__)
    if check is None:
        raise TypeError(f"preflight: not a job config: {type(config).__name__}")
    return check(config)


def warn_before_start(config: Any) -> list[str]:
    """Log :func:`preflight`'s warnings at WARNING (logger ``privstream.jobs.preflight``); a check
    that itself fails is logged and skipped: it never stops a job."""
    try:
        warnings = preflight(config)
    except Exception as exc:  # noqa: BLE001 - advice only: never the reason a job does not start
        logger.warning("pre-flight utility check skipped: %s", exc)
        return []
    for warning in warnings:
        logger.warning("pre-flight: %s", warning)
    return warnings


def _smallest(
    fits: Callable[[float], bool], lo: float, *, integer: bool = False, limit: float = 1e12
) -> float | None:
    """The smallest value >= ``lo`` where the monotone ``fits`` holds (doubling, then bisection to 1 %
    or to an integer); None if not even ``limit`` fits."""
    hi = lo
    while not fits(hi):
        if hi >= limit:
            return None
        lo, hi = hi, min(hi * 2, limit)
    while (hi - lo > 1) if integer else (hi - lo > 0.01 * hi):
        mid = (lo + hi) // 2 if integer else (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return math.ceil(hi) if integer else hi


def _round_up(x: float) -> float:
    """``x`` rounded up to two significant digits (a value to type on the command line)."""
    if x <= 0:
        return x
    scale = 10 ** (math.floor(math.log10(x)) - 1)
    return math.ceil(x / scale - 1e-9) * scale


def _g(x: float) -> str:
    return f"{_round_up(x):g}"


def _num(x: float) -> str:
    """A count for a message: thousands separated, small values with 3 significant digits."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


# ---- heavy-hitters ------------------------------------------------------------------------------


def _hh_bar(config: Any, epsilon: float | None = None) -> tuple[float, str]:
    """(the bar: error_bound.below of a release, its mechanism) for ``config``'s release path at
    ``epsilon`` (default: the config's)."""
    epoch = config.epoch if isinstance(config.epoch, int) else None
    eps = float(config.epsilon if epsilon is None else epsilon)
    key = (
        eps,
        float(config.delta),
        config.k,
        config.m,
        epoch,
        config.shard_key,
        config.release_mode,
        config.mechanism,
    )
    return _release_bar(*key)


@lru_cache(maxsize=64)
def _release_bar(
    epsilon: float,
    delta: float,
    k: int,
    m: int | None,
    epoch: int | None,
    shard_key: str | None,
    release_mode: str | None,
    mechanism: str,
) -> tuple[float, str]:
    """The job's own release path (:class:`~privstream.operators.release_logic.EpochReleaser`:
    mechanism choice, group privacy for count epochs, n_bound) on empty sketches of one shard, with
    a fresh in-memory ledger: nothing is published. (A bound holding for every shard at once is a
    little larger: β split over the shards.)"""
    from privstream.jobs.config import HeavyHittersConfig
    from privstream.operators.release_logic import EpochReleaser, ReleaseRefusal
    from privstream.operators.shard_logic import EpochReleaseInput

    config = HeavyHittersConfig(
        epsilon=epsilon,
        delta=delta,
        k=k,
        m=m,
        epoch=epoch if epoch is not None else timedelta(seconds=1),
        shard_key=shard_key,
        release_mode=release_mode,
        mechanism=mechanism,
    )
    releaser = EpochReleaser(config.release, config.spec, config.policy)
    outcome, _ = releaser.decide(EpochReleaseInput(0, config.spec.combine({}, 1), 1))
    assert outcome is not None and not isinstance(outcome, ReleaseRefusal)  # a fresh ledger
    return float(outcome.error_bound.below), str(outcome.mechanism)


def _epsilon_fix(config: Any, fits: Callable[[float], bool]) -> float | None:
    """The smallest ε (two significant digits) whose bar ``fits``: the bars of the thresholded
    mechanisms scale about as 1/ε, so start from that guess, step up until one fits, then bisect
    (each step is one calibration); None above ε = 100."""
    bar = _hh_bar(config)[0]
    lo, hi = float(config.epsilon), None
    guess = _round_up(config.epsilon * bar / _target(fits, bar))
    for _ in range(12):
        if guess > 100:
            return None
        if fits(_hh_bar(config, guess)[0]):
            hi = guess
            break
        lo, guess = guess, _round_up(guess * 1.25)
    if hi is None:
        return None
    for _ in range(5):
        mid = _round_up((lo + hi) / 2)
        if mid >= hi or mid <= lo:
            break
        lo, hi = (lo, mid) if fits(_hh_bar(config, mid)[0]) else (mid, hi)
    return hi


def _target(fits: Callable[[float], bool], bar: float) -> float:
    """The largest bar that ``fits`` (monotone: smaller bars fit), to 1 %."""
    lo, hi = 0.0, bar
    while hi - lo > 0.01 * bar:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return max(lo, 1e-9)


def heavy_hitters(config: Any) -> list[str]:
    """Count epochs: warn when an epoch of ``--epoch`` events per shard can hold fewer than
    ``min(k, MIN_VISIBLE_ITEMS)`` items of count >= the release's bar (so releases are empty or
    nearly), naming the epoch size and the ε that fix it. (Calibrating GSHM for ``auto`` at a large
    k takes seconds: the check costs what one release's calibration costs.)"""
    bar, mechanism = _hh_bar(config)
    if isinstance(config.epoch, timedelta):
        logger.info(
            "pre-flight: time epochs hold no declared number of events (not public), so whether releases "
            "will be empty is not judged; an item needs about %s events in its shard's epoch to be "
            "released (%s)",
            _g(bar),
            mechanism,
        )
        return []
    epoch, want = config.epoch, min(config.k, MIN_VISIBLE_ITEMS)
    if epoch / bar >= want:
        return []
    need_epoch = math.ceil(bar * want)
    need_eps = _epsilon_fix(config, lambda bar: epoch / bar >= want)
    fix_eps = "" if need_eps is None else f", or --epsilon {need_eps:g}"
    return [
        f"heavy-hitters: a release ({mechanism}, ε={config.epsilon:g}, δ={config.delta:g}, k={config.k}) "
        f"surely shows only items with >= {bar:g} events in their shard's epoch, and an epoch of "
        f"{epoch} events holds at most {int(epoch // bar)} such items (fewer than {want}): the releases "
        f"will be empty or nearly. Smallest fix: --epoch {need_epoch}{fix_eps}"
    ]


# ---- sliding-window -----------------------------------------------------------------------------


def window_noise(settings: Any) -> float:
    """σ of one DPSW-Sketch window estimate: the root mean square over the positions of a substream
    (in steady state) of √(Σ a/ρ_j) over the PCMSs Alg. 3 sums there — the current substream's
    prefix (the largest checkpoint within it), the old substream's suffix (the smallest checkpoint
    covering the window's part of it) and the whole substreams between (at ρ_1); each counter's
    noise has variance a/ρ_j (DPSW Alg. 1)."""
    import numpy as np

    from privstream.window.pcms import pcms_variance

    p = settings.params
    var = np.array([float(pcms_variance(p.depth, rho)) for rho in p.budgets])  # index j - 1
    big_w, w, n = p.substream, p.window, len(p.checkpoints)
    ascending = np.array(p.checkpoints[::-1], dtype=np.int64)
    offset = np.arange(1, big_w + 1, dtype=np.int64)  # position in the current substream
    base = (-(-w // big_w) + 2) * big_w  # a substream start late enough for a full window
    t = base + offset - 1  # zero-based positions: substream t // W starts at offset 1
    y = n - (np.searchsorted(ascending, offset, side="right") - 1)  # largest checkpoint <= offset
    total = var[y - 1]
    start = t - w + 1
    old, cur = start // big_w, t // big_w
    rest = (old + 1) * big_w - start  # the window's part of the old substream
    x = n - np.searchsorted(ascending, rest, side="left")  # smallest checkpoint >= rest
    apart = old != cur
    total = total + np.where(apart, var[np.clip(x, 1, n) - 1] + (cur - old - 1) * var[0], 0.0)
    return float(np.sqrt(total.mean()))


def _window_problem(settings: Any) -> tuple[float, float, float] | None:
    """(σ, the largest noise among the queried items, the bar) if the bar is below that noise."""
    sigma = window_noise(settings)
    items = len(settings.query_items)
    largest = sigma * math.sqrt(2 * math.log(max(items, 2)))
    n = settings.window if not settings.event_time else settings.window_items
    bar = float((settings.gamma - settings.params.zeta) * n)
    return (sigma, largest, bar) if largest >= bar else None


def _valid(make: Callable[[], Any]) -> Any:
    try:
        return make()
    except ValueError:
        return None


def sliding_window(config: Any) -> list[str]:
    """Warn when the largest noise among the queried items reaches the heavy-hitter bar (γ − ζ)·n."""
    s = config.settings
    problem = _window_problem(s)
    if problem is None:
        return []
    sigma, largest, bar = problem

    def fits_eps(epsilon: float) -> bool:
        candidate = _valid(lambda: replace(s, epsilon=epsilon))
        return candidate is not None and _window_problem(candidate) is None

    fixes = []
    if not s.event_time:  # a count window: the bar grows like w, the noise like √(w/W)
        window = _smallest(
            lambda w: (
                (c := _valid(lambda: replace(s, window=int(w)))) is not None and _window_problem(c) is None
            ),
            float(s.window),
            integer=True,
        )
        if window is not None:
            fixes.append(f"--window {int(window)}")
    else:
        items = _smallest(
            lambda n: _window_problem(replace(s, window_items=int(n))) is None,
            float(s.window_items),
            integer=True,
        )
        if items is not None:
            fixes.append(f"a window of >= {int(items)} items per shard (--window-items, a true public bound)")
    eps = _smallest(fits_eps, float(s.epsilon), limit=100.0)
    if eps is not None:
        fixes.append(f"--epsilon {_g(eps)}")
    return [
        f"sliding-window: an estimate's noise has σ ≈ {sigma:,.0f} (DPSW: up to {s.params.max_live_substreams} "
        f"summed Count-Min queries of depth {s.depth}), so the largest noise among the "
        f"{len(s.query_items)} queried items (≈ {largest:,.0f}) reaches the heavy-hitter bar "
        f"(γ − ζ)·n = {_num(bar)}: releases will list noise. Smallest fix: {' or '.join(fixes) or 'a larger window'}"
    ]


# ---- continual-monitor --------------------------------------------------------------------------


def continual_noise(settings: Any) -> tuple[float, float]:
    """(σ of a window count summed over the k nodes, the release bar (θ − λ)·k·W′): PCC's level-0
    discrete Laplace scale b_0 = (β_0 + 1)/ε_0 (Chan et al. Alg. 1, Lemma 2), σ = √(2k)·b_0. PDCH-LU
    runs PCC with λ/11 (its Lemma 4); PDCH-BF with λ."""
    from privstream.continual.blocks import pcc_params

    lam = settings.lam / 11 if settings.mode == "lu" else settings.lam
    p = pcc_params(settings.epsilon, lam, settings.window)
    sigma = math.sqrt(2 * settings.nodes) * float(p.level_scale(0))
    w = settings.window_items if settings.window_items is not None else settings.window
    bar = (settings.theta - settings.lam) * settings.nodes * w
    return sigma, bar


def _continual_ok(settings: Any) -> bool:
    sigma, bar = continual_noise(settings)
    return sigma * math.sqrt(2 * math.log(max(settings.universe, 2))) < bar


def continual_monitor(config: Any) -> list[str]:
    """Warn when the largest noise among the universe's items reaches the release bar (θ − λ)·k·W′."""
    s = config.settings
    if _continual_ok(s):
        return []
    sigma, bar = continual_noise(s)
    largest = sigma * math.sqrt(2 * math.log(max(s.universe, 2)))
    per_item = largest / ((s.theta - s.lam) * s.nodes)  # W′ at which the bar reaches the noise
    fixes = []
    if s.epsilon * largest / bar <= 100:  # ε > 100 is refused (docs/privacy.md, "Parameter bounds")
        fixes.append(f"--epsilon {_g(s.epsilon * largest / bar)} (the noise scales as 1/ε)")
    if s.window_items is None:
        fixes.append(f"--window {math.ceil(per_item)} steps (W′ = W: one item per node and step)")
    fixes.append(
        f"--window-items {math.ceil(per_item)} if each node really sees that many items per window "
        "(a public bound: the bar is (θ − λ)·k·W′)"
    )
    lam = _smallest(
        lambda x: (c := _valid(lambda: replace(s, lam=x))) is not None and _continual_ok(c),
        float(s.lam),
        limit=float(s.theta),
    )
    if lam is not None and lam < s.theta:
        fixes.append(f"--lam {_g(lam)} (less noise, a coarser error target)")
    return [
        f"continual-monitor: PCC adds noise of σ ≈ {sigma:,.0f} to every item's window count (ε={s.epsilon:g}, "
        f"λ={s.lam:g}, {s.nodes} node(s)); the largest among the {s.universe} universe items (≈ {largest:,.0f}) "
        f"exceeds the release bar (θ − λ)·k·W′ = {_num(bar)}: releases will be mostly noise. "
        f"Smallest fix: {' or '.join(fixes)}"
    ]


# ---- ldp-heavy-hitters --------------------------------------------------------------------------


def ldp_noise(settings: Any, reports: int) -> float:
    """σ of an item's estimated count from ``reports`` reports: √(n·h(1 − h))/(p − q) with h the
    probability that a report of another item hits it (GRR: q; BDR/CNR: p1·q2 over p1·(p2 − q2))."""
    params = settings.params
    if settings.scheme == "bgr":
        p, q = params.grr_full
        hit, denominator = q, p - q
    elif settings.scheme == "dsr":
        p, q = params.grr_shrunk
        hit, denominator = q, p - q
    else:
        p1, _ = params.m1
        _, q2 = params.m2
        hit, denominator = p1 * q2, params.eq2_denominator()
    return math.sqrt(reports * float(hit) * (1 - float(hit))) / float(denominator)


def _ldp_ok(settings: Any) -> bool:
    n = settings.epoch_reports
    return ldp_noise(settings, n) * math.sqrt(2 * math.log(max(settings.k, 2))) < n / settings.k


def ldp_heavy_hitters(config: Any) -> list[str]:
    """Warn when the largest estimator noise over the domain reaches n/k (the k-th item's most)."""
    s = config.settings
    if _ldp_ok(s):
        return []
    n = s.epoch_reports
    sigma = ldp_noise(s, n)
    largest = sigma * math.sqrt(2 * math.log(max(s.k, 2)))
    reports = math.ceil(n * (largest / (n / s.k)) ** 2)  # σ grows like √n, the counts like n
    fixes = [f"--epoch-reports {reports}"]
    eps = _smallest(
        lambda e: (c := _valid(lambda: replace(s, epsilon=e))) is not None and _ldp_ok(c),
        float(s.epsilon),
        limit=50.0,
    )
    if eps is not None:
        fixes.append(f"--epsilon {_g(eps)}")
    return [
        f"ldp-heavy-hitters: an item's estimated count over an epoch of {n} reports has noise σ ≈ {sigma:,.0f} "
        f"({s.scheme}, ε={s.epsilon:g}); the largest among the k={s.k} released items (≈ {largest:,.0f}) "
        f"reaches n/k = {n / s.k:,.0f}, the most the k-th heaviest item can have: releases will be "
        f"mostly noise. Smallest fix: {' or '.join(fixes)}"
    ]
