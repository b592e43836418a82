"""Streams split into sites and time steps, for the continual (sliding-window) studies.

Chan, Li, Shi, Xu ("Differentially Private Continual Monitoring of Heavy Hitters from Distributed
Streams", §5) split the Netflix ratings' users at random into k = 100 groups (sites), one stream
each, with one time step per day. :func:`split_sites` does the same for any workload with user ids
and event times; :func:`ratings_stand_in` generates a synthetic stand-in for the Netflix data
(registered as the workload ``ratings-sim``): a Zipf–Mandelbrot catalogue of n = 17,770 items whose
popularity drifts from day to day, a Poisson number of ratings per day, users uniform.

Synthetic *data* comes from ``numpy.random`` seeded by the evaluation seed (never privacy noise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from privstream.eval.workloads import Workload, _float_param, _int_param, register_workload
from privstream.validation import check_int

DAY_MS = 86_400_000
NETFLIX_ITEMS = 17_770  #: the Netflix Prize catalogue size (the paper's n)


def ratings_stand_in(
    *,
    days: int = 100,
    per_day: int = 1_000,
    universe: int = NETFLIX_ITEMS,
    s: float = 1.0,
    shift: float = 10.0,
    drift: float = 0.05,
    users: int = 48_000,
    seed: int = 0,
) -> Workload:
    """A synthetic ratings stream: each day a Poisson(``per_day``) number of ratings, each by a
    uniform user among ``users``, of item x with probability ∝ w_x·exp(g_x(day)), where w is
    Zipf–Mandelbrot 1/(rank + shift)^s over a random ranking of ``universe`` items and g_x a Gaussian
    random walk with daily step ``drift`` (popularity drifts, new heavy hitters rise). Times are
    uniform within each day (ms from day 0)."""
    days = check_int("days", days)
    per_day = check_int("per_day", per_day)
    universe = check_int("universe", universe, minimum=2)
    users = check_int("users", users)
    rng = np.random.default_rng(seed)
    base = -s * np.log(np.arange(1, universe + 1) + shift)
    base = base[rng.permutation(universe)]
    walk = np.zeros(universe)
    items, who, times = [], [], []
    for day in range(days):
        walk += rng.normal(0.0, drift, universe)
        logits = base + walk
        p = np.exp(logits - logits.max())
        count = int(rng.poisson(per_day))
        items.append(rng.choice(universe, size=count, p=p / p.sum()))
        who.append(rng.integers(0, users, size=count))
        times.append(day * DAY_MS + np.sort(rng.integers(0, DAY_MS, size=count)))
    return Workload(
        "ratings-sim",
        np.concatenate(items).astype(np.int64),
        range(universe),
        users=np.concatenate(who).astype(np.int64),
        times=np.concatenate(times).astype(np.int64),
        description=(
            f"synthetic ratings: {days} days x Poisson({per_day}) ratings, Zipf-Mandelbrot(s={s:g}, "
            f"shift={shift:g}) over {universe} items, popularity drift {drift:g}/day"
        ),
    )


def _number(params: Mapping[str, str], key: str, default: float) -> float:
    value = _float_param(params, key, default)
    return default if value is None else value


def _ratings_sim(params: Mapping[str, str], seed: int, max_events: int | None) -> Workload:
    return ratings_stand_in(
        days=_int_param(params, "days", 100),
        per_day=_int_param(params, "per_day", 1_000),
        universe=_int_param(params, "universe", NETFLIX_ITEMS, minimum=2),
        s=_number(params, "s", 1.0),
        shift=_number(params, "shift", 10.0),
        drift=_number(params, "drift", 0.05),
        users=_int_param(params, "users", 48_000),
        seed=seed,
    )


register_workload(
    "ratings-sim",
    _ratings_sim,
    "synthetic stand-in for the Netflix ratings (Chan et al. §5): drifting Zipf catalogue of 17,770 "
    "items, Poisson ratings per day, user ids and daily times",
    parameters=("days", "per_day", "universe", "s", "shift", "drift", "users"),
)


@dataclass(frozen=True)
class SiteSteps:
    """A workload cut into ``k`` sites and ``steps`` time steps: ``items[site][step]`` (int64 arrays,
    stream order within the step), over the workload's ``domain``."""

    name: str
    items: list[list[np.ndarray]]
    domain: range
    step_ms: int

    @property
    def k(self) -> int:
        return len(self.items)

    @property
    def steps(self) -> int:
        return len(self.items[0]) if self.items else 0

    def counts(self, step: int) -> np.ndarray:
        """The true per-site item counts of ``step`` (0-based), shape (k,)."""
        return np.array([len(site[step]) for site in self.items], dtype=np.int64)

    def histogram(self, step: int) -> np.ndarray:
        """The true counts of every domain element over all sites at ``step`` (dense, int64)."""
        n = len(self.domain)
        out = np.zeros(n, dtype=np.int64)
        for site in self.items:
            out += np.bincount(site[step] - self.domain.start, minlength=n)
        return out


def split_sites(w: Workload, k: int, steps: int, step_ms: int = DAY_MS, seed: int = 0) -> SiteSteps:
    """Users split uniformly at random into ``k`` sites (a seeded permutation, as the paper splits
    Netflix users into groups); time steps of ``step_ms`` from the first event; the ``steps``
    consecutive steps with the most events (so a sparse real stream uses its busiest period)."""
    k = check_int("sites", k)
    steps = check_int("steps", steps)
    if w.users is None or w.times is None or w.domain is None:
        raise ValueError(f"workload {w.name}: needs user ids, event times and a domain to split into sites")
    rng = np.random.default_rng(seed)
    user_ids, user_codes = np.unique(w.users, return_inverse=True)
    site_of_user = rng.permutation(len(user_ids)) % k
    site = site_of_user[user_codes]
    step = (w.times - w.times.min()) // step_ms
    total = int(step.max()) + 1
    if total < steps:
        raise ValueError(f"workload {w.name}: {total} steps of {step_ms} ms, fewer than the {steps} needed")
    per_step = np.bincount(step, minlength=total)
    busiest = int(np.argmax(np.convolve(per_step, np.ones(steps, dtype=np.int64), mode="valid")))
    keep = (step >= busiest) & (step < busiest + steps)
    items, site, step = w.items[keep], site[keep], step[keep] - busiest
    out: list[list[np.ndarray]] = [[] for _ in range(k)]
    order = np.lexsort((np.arange(len(items)), step, site))  # by site, then step, stream order within
    items, site, step = items[order], site[order], step[order]
    bounds = np.searchsorted(site * steps + step, np.arange(k * steps + 1))
    for i in range(k):
        for t in range(steps):
            out[i].append(items[bounds[i * steps + t] : bounds[i * steps + t + 1]])
    return SiteSteps(w.name, out, w.domain, step_ms)
