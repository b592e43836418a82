"""The Flink-free logic of the ``sliding-window`` job: one DPSW-Sketch per shard over Kafka messages.

DPSW-Sketch (Wang–Wang–Chen, KDD 2024; docs/sliding-window.md) with **count-based** windows (the
paper's: the last w items of a shard; the default) or **event-time** windows (the core's extension,
:attr:`~privstream.window.Windowing.EVENT_TIME`: the last w ms of event time). A shard is one Kafka
partition of the events topic, filled by the data-independent partitioner
(:mod:`privstream.partitioning`: a hash of the item or the user), which this logic re-checks on every
message (:func:`privstream.operators.routing.routing_error`).

:class:`WindowShardLogic` takes the raw bytes of one shard's messages and returns what the operator
emits: dead letters and ``WindowRelease`` records — the estimates (Alg. 3, corrected) of the public
query set and the γ-heavy hitters of the declared domain (Alg. 3 lines 6–9), with the guarantee
(Lemma 4.1, Thm 3.2) and the ledger charge that covers it. When a release happens:

* count windows: whenever the shard's item count reaches the end of a substream (a multiple of W);
* event-time windows: on the producers' ``EpochWatermark`` punctuations, the protocol of the
  time-epoch jobs (:mod:`privstream.operators.epochs`, written by
  :meth:`privstream.connectors.produce.EventProducer.punctuate` to every partition, on the public
  schedule of :mod:`privstream.connectors.punctuation`). ``watermark_ms = M`` says no event with
  time < M follows, so the sketch's clock moves to T = M − 1 (:meth:`DPSWSketch.advance_to`); a
  punctuation whose T completes at least one substream of the public grid (origin + k·W) releases
  **once**, answering the window [max(T − w + 1, origin), T] (with punctuations on the grid, i.e.
  ``--punctuate-every`` W, T is a substream end and the window is read exactly). Each event's time is
  its position; events at or before the clock (late) or beyond :attr:`DPSWSketch.horizon` (more
  than one substream ahead) are refused by the core, so they are not counted and their message is
  dead-lettered with the reason. Which releases happen, and whether an event counts, depend only
  on the public punctuations and that event's own time, never on other events: the add/remove-one-
  event relation (:func:`privstream.window.params.shard_relation`) holds.

Shards release **independently**; summing their estimates is post-processing of parallel mechanisms.

Its whole state is the core sketch's versioned binary state (:meth:`DPSWSketch.to_bytes`,
:mod:`privstream.window.state`), the shard's binding (:meth:`WindowSettings.binding`: shard count,
shard key, declared domain, which the sketch does not hold) and a refusal reason once a misrouted
message was seen (fail closed, as the heavy-hitters job). Noise is keyed: shard s's key is
HMAC-SHA256(submission key, s), the submission key being a CSPRNG secret the launcher draws (tests
inject it); the key then lives in the sketch's state, so a replay after a restore of the same
submission redraws identical noise and a release left in an aborted Kafka transaction equals its
committed replay. A restored state is refused unless its parameters and binding are this job's; a
state whose key is not this submission's (a new submission resuming a savepoint) is re-keyed
(:meth:`DPSWSketch.rekey`): its incomplete substreams get fresh noise, so no two submissions share
noise on data that differs, and each submission is charged to the ledger.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import hmac
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from privstream.connectors.avro_codec import encode
from privstream.connectors.dead_letter import dead_letter_record
from privstream.connectors.validation import parse_duration_ms
from privstream.operators.payloads import EventPayload, PayloadError, WatermarkPayload, decode_payload
from privstream.operators.routing import SHARD_KEYS, routing_error
from privstream.operators.test_hooks import TestHooks

from privstream.noise.rng import new_noise_key
from privstream.options import int_list, option
from privstream.validation import check_int, check_privacy_bound
from privstream.window import DPSWParams, DPSWSketch, Windowing, dpsw_params
from privstream.window.params import check_gamma, shard_relation

logger = logging.getLogger(__name__)

Output = tuple[Literal["release", "state", "dead-letter"], bytes]

PRIVACY_UNIT = "one event (event-level DP; a user with k events is protected with group privacy only)"
COMPOSITION = (
    "each shard releases independently over its own last w items; shards are disjoint sub-streams of a "
    "data-independent partition, so the releases of all shards (and sums of their estimates) are "
    "post-processing of parallel mechanisms and keep the stated (epsilon, delta) (parallel composition)"
)
EVENT_TIME_COMPOSITION = (
    "each shard releases independently over its own events of the window [T - w + 1, T] at each "
    "punctuation T that completes a substream; shards are disjoint sub-streams of a data-independent "
    "partition, so the releases of all shards (and sums of their estimates) are post-processing of "
    "parallel mechanisms and keep the stated (epsilon, delta) (parallel composition); the shards' "
    "estimates answer the same window when the producers punctuate every partition with the same T"
)
WINDOWINGS = tuple(w.value for w in Windowing)  #: ("count", "event-time")


def _length(text: str, option: str, args: argparse.Namespace) -> int:
    """``--window``/``--substream``: items (count) or event-time ms (event-time: also ``10s``, ``5m``)."""
    if getattr(args, "windowing", "count") == "event-time" and not text.strip().lstrip("-").isdigit():
        return parse_duration_ms(text, option)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{option}: an integer number of items (count windows), got {text!r}") from None


@dataclass(frozen=True)
class LedgerCharge:
    """The one ledger entry that covers every release of the run (written by the launcher)."""

    ledger_id: str = ""
    sequence: int = 0
    entry_hash: str = ""


@dataclass(frozen=True)
class WindowSettings:
    """The job's public parameters, validated on construction (a bad value names its option)."""

    window: int = field(
        metadata=option("w: items of a shard (count) or event time (10s, or ms)", parse=_length)
    )
    substream: int = field(
        metadata=option("W: substream length, items or event time (as --window)", parse=_length)
    )
    epsilon: float = field(metadata=option("ε of each shard's sketch (whole run)", kind=float))
    delta: float = field(metadata=option("δ of each shard's sketch (whole run)", kind=float))
    domain_size: int = field(metadata=option("declared domain: items 0..d-1", kind=int))
    gamma: float = field(
        metadata=option("γ: heavy hitters have ≥ γ·w of the window (must exceed ζ = e/width)", kind=float)
    )
    shards: int  #: the events topic's partitions (no option: read from the topic)
    depth: int = field(default=3, kw_only=True, metadata=option("a: PCMS rows", kind=int))
    width: int = field(default=2000, kw_only=True, metadata=option("b: PCMS counters per row", kind=int))
    checkpoints: tuple[int, ...] | None = field(
        default=None,
        metadata=option("I: comma list from W down to 1", parse=int_list, default_text="from --alpha"),
    )
    alpha: float | None = field(
        default=None, metadata=option("smooth-histogram factor", kind=float, default_text="0.5")
    )
    budget_ratio: float | None = field(
        default=None,
        metadata=option("q of the budget split", kind=float, default_text="α, 0.5 with --checkpoints"),
    )
    hash_seed: int = field(default=0, metadata=option("the public hash seed", kind=int))
    #: the public query set (default: the whole domain)
    queries: tuple[int, ...] | None = field(
        default=None,
        metadata=option("public query items, comma list", parse=int_list, default_text="the domain"),
    )
    shard_key: str = field(default="item", metadata=option("what the partitioner hashed", choices=SHARD_KEYS))
    #: "count" (the paper's last w items) or "event-time" (the last w ms)
    windowing: str = field(
        default="count",
        metadata=option(
            "count: the last w items of a shard (the paper); event-time: the last w ms, released on "
            "EpochWatermark punctuations (produce with --punctuate-every W)",
            choices=WINDOWINGS,
        ),
    )
    #: event-time: the public start of the substream grid (ms; default 0)
    origin: int | None = field(
        default=None,
        metadata=option("event-time: public start of the grid (ms)", kind=int, default_text="0"),
    )
    #: event-time: a PUBLIC bound n on a shard's items per window, declared in advance (the
    #: heavy-hitter threshold (γ − ζ)·n; never measured from the data)
    window_items: int | None = field(
        default=None,
        metadata=option(
            "event-time: PUBLIC bound on a shard's items per window (heavy-hitter threshold; required)",
            kind=int,
        ),
    )
    charge: LedgerCharge = field(default_factory=LedgerCharge)
    submission_key: bytes = field(default_factory=new_noise_key, repr=False)  #: secret, per submission

    def __post_init__(self) -> None:
        check_privacy_bound("--epsilon", self.epsilon, "epsilon")
        check_privacy_bound("--delta", self.delta, "delta")
        self._check_windowing()
        if self.checkpoints is None and self.alpha is None:
            object.__setattr__(self, "alpha", 0.5)
        if self.checkpoints is not None and self.budget_ratio is None:
            object.__setattr__(self, "budget_ratio", 0.5)
        self.params  # noqa: B018 - validates window, substream, checkpoints/alpha, budget, depth, width
        check_int("domain_size", self.domain_size)
        check_int("shards", self.shards)
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, int | float):
            raise ValueError(f"gamma (--gamma): must be a number in (0, 1), got {self.gamma!r}")
        try:  # the heavy-hitter threshold (gamma - zeta)*w must be positive (DPSW Alg. 3 line 8)
            check_gamma(self.gamma, self.params.zeta)
        except ValueError as exc:
            raise ValueError(f"gamma (--gamma): {exc}") from None
        if self.shard_key not in SHARD_KEYS:
            raise ValueError(f"shard_key: must be one of {SHARD_KEYS}, got {self.shard_key!r}")
        if self.queries is not None:
            if not self.queries:
                raise ValueError("queries: give at least one item (or none for the whole domain)")
            bad = [q for q in self.queries if type(q) is not int or not 0 <= q < self.domain_size]
            if bad:
                raise ValueError(
                    f"queries: items must be ints of the domain 0..{self.domain_size - 1}: {bad}"
                )
        if not isinstance(self.submission_key, bytes) or len(self.submission_key) < 32:
            raise ValueError("submission_key: must be at least 32 secret random bytes")

    def _check_windowing(self) -> None:
        """Fail fast, naming the option: the windowing, and what only event time takes or needs."""
        if self.windowing not in WINDOWINGS:
            raise ValueError(f"windowing (--windowing): must be one of {WINDOWINGS}, got {self.windowing!r}")
        if not self.event_time:
            for name, value in (("origin", self.origin), ("window_items", self.window_items)):
                if value is not None:
                    option = "--" + name.replace("_", "-")
                    raise ValueError(
                        f"{name} ({option}): only for --windowing event-time (count-based positions are "
                        "item indices from 1 and a count window holds exactly w items)"
                    )
            return
        if self.window_items is None:
            raise ValueError(
                "window_items (--window-items): event-time heavy hitters need a PUBLIC bound on a shard's "
                "items per window, declared in advance (the threshold is (gamma - zeta) * n; an event-time "
                "window spans w ms, not w items), never measured from the data"
            )
        check_int("window_items (--window-items)", self.window_items, type_error=ValueError)

    @property
    def event_time(self) -> bool:
        return self.windowing == Windowing.EVENT_TIME.value

    @property
    def params(self) -> DPSWParams:
        return dpsw_params(
            window=self.window,
            substream=self.substream,
            checkpoints=self.checkpoints,
            alpha=self.alpha,
            budget_ratio=self.budget_ratio,
            epsilon=self.epsilon,
            delta=self.delta,
            depth=self.depth,
            width=self.width,
            seed=self.hash_seed,
            windowing=Windowing(self.windowing),
            origin=self.origin,
        )

    @property
    def query_items(self) -> Sequence[int]:
        return range(self.domain_size) if self.queries is None else self.queries

    @property
    def composition(self) -> str:
        """How the shards' releases combine (parallel composition)."""
        return EVENT_TIME_COMPOSITION if self.event_time else COMPOSITION

    def neighbour_relation(self) -> str:
        """The relation every release holds for (docs/sliding-window.md, "Flink job"). Event time:
        the core's add/remove-one-event relation (DPSW Lemma 4.1 per substream: one event changes
        one substream's PCMSs by a counters each) and, across shards,
        :func:`~privstream.window.params.shard_relation`."""
        if self.event_time:
            params = self.params
            return (
                f"{params.guarantee().neighbour_relation}; per shard (a hash of the {self.shard_key}, mod "
                f"{self.shards}): {shard_relation(params)}; an event's inclusion depends only on its own "
                "time and the public EpochWatermark punctuations (late or beyond-horizon events are "
                "dead-lettered, never counted)"
            )
        return (
            f"{self.params.guarantee().neighbour_relation}; here per shard: the event is replaced by one "
            f"the partitioner (a hash of the {self.shard_key}, mod {self.shards}) puts in the same shard, "
            "so every shard's length stays public (a replacement that moves an event to another shard "
            "adds and removes one event and is not covered)"
        )

    def shard_noise_key(self, shard: int) -> bytes:
        """Shard ``shard``'s noise key: one key per sketch, never shared (docs/sliding-window.md)."""
        message = f"privstream sliding-window shard {shard}".encode()
        return hmac.new(self.submission_key, message, hashlib.sha256).digest()

    def new_sketch(self, shard: int) -> DPSWSketch:
        return DPSWSketch(self.params, domain=range(self.domain_size), noise_key=self.shard_noise_key(shard))

    def binding(self, shard: int) -> str:
        """What shard ``shard``'s saved state is bound to beyond the sketch's parameters (which its
        state holds): the shard, the shard count and key of the partitioner (a state resumed under
        another partition would mix two hash classes in one window) and the declared domain of the
        heavy-hitter query. The operator keeps it next to the sketch; a restore checks it."""
        return (
            f"shard {shard} of {self.shards} (a hash of the {self.shard_key}); "
            f"domain 0..{self.domain_size - 1}"
        )


class WindowShardLogic:
    """See the module docstring. ``state``: a previous :meth:`to_bytes` (after a restore);
    ``refused``: a previous :attr:`refused` (the operator keeps it in state next to the sketch);
    ``binding``: the :meth:`WindowSettings.binding` stored with ``state`` (checked when given; the
    operator always stores and passes it); ``hooks`` (TESTS ONLY, None in production): with
    :attr:`~privstream.operators.test_hooks.TestHooks.expose_states_topic` set, a ``("state",
    SketchSnapshot bytes)`` output after every release.

    A restored state must have been built with this job's parameters and binding (else ValueError:
    restore with the same options, or start afresh). If its noise key is not this submission's
    shard key — a new submission resuming a savepoint, not a failover of the same submission — it
    is re-keyed (:meth:`DPSWSketch.rekey`; deterministic, so a failover before the re-keyed state is
    stored re-keys identically)."""

    def __init__(
        self,
        settings: WindowSettings,
        shard: int,
        state: bytes | None = None,
        refused: str | None = None,
        binding: str | None = None,
        *,
        hooks: TestHooks | None = None,
    ) -> None:
        self.settings = settings
        #: TESTS ONLY: a ("state", ...) output after every release (the hooks' states topic set)
        self.expose_states = hooks is not None and bool(hooks.expose_states_topic)
        self.shard = shard
        self.refused = refused
        self.binding = settings.binding(shard)
        if state is None:
            self.sketch = settings.new_sketch(shard)
            return
        self.sketch = DPSWSketch.from_bytes(state, domain=range(settings.domain_size))
        self._check_restored(binding)
        key = settings.shard_noise_key(shard)
        if self.sketch.noise_key != key:
            self.sketch.rekey(key)  # a new submission: never the old run's noise on new data
            logger.info("shard %d: a state of another submission, re-keyed (fresh noise)", shard)

    def _check_restored(self, binding: str | None) -> None:
        """Refuse a restored sketch built with other parameters (e.g. another ε, w or W, or a count
        savepoint under --windowing event-time) or another binding (shards, shard key, domain)."""
        got, want = self.sketch.params, self.settings.params
        diff = [
            f"{f.name} {getattr(got, f.name)} (now {getattr(want, f.name)})"
            for f in dataclasses.fields(got)
            if getattr(got, f.name) != getattr(want, f.name)
        ]
        if binding is not None and binding != self.binding:
            diff.append(f"{binding!r} (now {self.binding!r})")
        if diff:
            raise ValueError(
                f"shard {self.shard}: the restored sketch was built with other parameters: "
                f"{'; '.join(diff)}; restore with the same options, or start afresh"
            )

    def to_bytes(self) -> bytes:
        """The sketch's binary state (byte-identical to the core sketch fed the same items)."""
        return self.sketch.to_bytes()

    def _dead_letter(self, value: bytes, error: str, offset: int, topic: str) -> Output:
        record = dead_letter_record(
            value=value, error=error, topic=topic, partition=self.shard, offset=offset
        )
        return "dead-letter", encode("DeadLetter", record)

    def process(self, value: bytes, offset: int, topic: str) -> list[Output]:
        """One message of this shard → outputs (module docstring)."""
        if self.refused is not None:
            return [self._dead_letter(value, f"shard refuses releases: {self.refused}", offset, topic)]
        try:
            payload = decode_payload(value, user_sets=False)
        except PayloadError as exc:
            return [self._dead_letter(value, str(exc), offset, topic)]
        if not isinstance(payload, EventPayload):
            if isinstance(payload, WatermarkPayload) and self.settings.event_time:
                return self.punctuate(payload.watermark_ms, value, offset, topic)
            return []  # EndMarker (a release needs no flush); EpochWatermark: count windows ignore it
        error = routing_error(payload, self.shard, self.settings.shards, self.settings.shard_key)
        if error is not None:
            self.refused = error
            return [self._dead_letter(value, f"{error}; this shard releases nothing more", offset, topic)]
        if self.settings.event_time:
            return self.add_events(payload, value, offset, topic)
        return self.add(payload.items)

    @property
    def completed(self) -> int:
        """The last substream complete at the clock (-1: none yet); at a substream end, the clock's."""
        sketch = self.sketch
        return sketch.substream_of(sketch.clock + 1) - 1

    def _released(self) -> list[Output]:
        out: list[Output] = [("release", self.release())]
        if self.expose_states:  # TESTS ONLY: the raw state is not private
            out.append(("state", self.snapshot()))
        return out

    def punctuate(self, watermark_ms: int, value: bytes, offset: int, topic: str) -> list[Output]:
        """Event time: an ``EpochWatermark`` M (no more events with time < M) moves the clock to
        T = M − 1 (:meth:`DPSWSketch.advance_to`; it never moves back, as
        :meth:`~privstream.operators.epochs.ShardProgress.punctuate`); one release if T completes at
        least one substream of the grid, none otherwise."""
        clock = watermark_ms - 1
        if clock <= self.sketch.clock:
            return []  # an old punctuation (another producer's, or a replay): nothing new
        before = self.completed
        try:
            self.sketch.advance_to(clock)
        except ValueError as exc:  # e.g. beyond the clock's range (2**62): never crash the shard
            return [self._dead_letter(value, f"punctuation refused by the sketch: {exc}", offset, topic)]
        return self._released() if self.completed > before else []

    def add_events(self, payload: EventPayload, value: bytes, offset: int, topic: str) -> list[Output]:
        """Event time: each event at its own time (DPSW Alg. 2 maintenance with positions). Events
        the core refuses — late (time <= the clock) or beyond the horizon (more than one substream
        ahead of it) — are not counted; the message goes to the dead-letter topic with the reason
        (one dead letter per reason). Events of one message need not be sorted (counters are sums)."""
        sketch = self.sketch
        times = payload.times
        clock, horizon = sketch.clock, sketch.horizon
        late, ahead = times <= clock, times > horizon
        out: list[Output] = []
        n = len(times)
        if bool(late.any()):
            reason = (
                f"{int(late.sum())} of {n} event(s) late: event time <= the clock {clock} (an EpochWatermark "
                "punctuation said every event up to it had arrived, or the time is before the public "
                f"--origin {sketch.params.origin}); those are not counted"
            )
            out.append(self._dead_letter(value, reason, offset, topic))
        if bool(ahead.any()):
            reason = (
                f"{int(ahead.sum())} of {n} event(s) beyond the horizon {horizon}: more than one substream "
                f"(W = {self.settings.substream} ms) ahead of the clock {clock}; punctuate first; those are "
                "not counted"
            )
            out.append(self._dead_letter(value, reason, offset, topic))
        keep = ~(late | ahead)
        if bool(keep.any()):
            kept = payload if bool(keep.all()) else payload.select(keep)
            order = np.argsort(kept.times, kind="stable")
            items = kept.items
            ordered = items[order] if isinstance(items, np.ndarray) else [items[i] for i in order.tolist()]
            sketch.update_batch(ordered, kept.times[order])
        return out

    def add(self, items: Sequence[object] | np.ndarray) -> list[Output]:
        """Feed items in order (DPSW Alg. 2 maintenance, batched at substream ends); a release at
        every substream end they reach."""
        length = self.settings.substream
        out: list[Output] = []
        done = 0
        while done < len(items):
            room = length - self.sketch.items % length
            chunk = items[done : done + room]
            self.sketch.update_batch(chunk)
            done += len(chunk)
            if self.sketch.items % length == 0:
                out += self._released()
        return out

    def snapshot(self) -> bytes:
        """TESTS ONLY: the state as a ``SketchSnapshot`` (epoch = the last substream completed)."""
        sketch = self.sketch
        record = {
            "sketch_type": "DPSWSketch",
            "build": "DPSW",
            "shard": self.shard,
            "epoch": self.completed,
            "n": sketch.items,
            "data": self.to_bytes(),
            "created_time": int(time.time() * 1000),
        }
        return encode("SketchSnapshot", record)

    def release_record(self) -> dict[str, Any]:
        """The ``WindowRelease`` of the sketch now (Alg. 3 reads only PCMSs of complete ranges)."""
        sketch, settings = self.sketch, self.settings
        guarantee = sketch.guarantee()
        relation = settings.neighbour_relation()
        if guarantee.private:
            g_eps, g_delta = guarantee.epsilon, guarantee.delta  # never None: the job always gives δ
            epsilon = float(settings.epsilon if g_eps is None else g_eps)
            delta = float(settings.delta if g_delta is None else g_delta)
            rho = float(guarantee.rho)
        else:  # injected noise (tests): nothing is guaranteed, so no ε, δ, ρ is claimed (the schema's
            # doubles are not nullable: 0.0) and the relation says so before naming the would-be one
            epsilon = delta = rho = 0.0
            relation = f"NO DP GUARANTEE (injected noise, tests only; the relation it would be: {relation})"
        queries = list(settings.query_items)
        estimates = sketch.estimate_batch(queries).tolist()
        n = settings.window_items  # event time: the public bound on items per window; count: None (w)
        bar = sketch.heavy_threshold(settings.gamma, window_items=n)
        heavy: list[tuple[Any, int]]
        if settings.queries is None:  # the queries are the whole domain in order: filter, not re-estimate
            heavy = [(q, e) for q, e in zip(queries, estimates, strict=True) if e >= bar]
        else:
            heavy = sketch.heavy_hitters(settings.gamma, window_items=n)
        return {
            "ledger_id": settings.charge.ledger_id,
            "ledger_sequence": settings.charge.sequence,
            "ledger_entry_hash": settings.charge.entry_hash,
            "shard": self.shard,
            "shards": settings.shards,
            "substream": self.completed,
            "position": sketch.clock,
            "window": settings.window,
            "window_start": sketch.window_start(),
            "windowing": settings.windowing,
            "window_end": sketch.clock,
            "window_items": n,
            "estimates": [{"item": q, "estimate": int(e)} for q, e in zip(queries, estimates, strict=True)],
            "gamma": float(settings.gamma),
            "heavy_threshold": bar,
            "heavy_hitters": [{"item": i, "estimate": int(e)} for i, e in heavy],
            "epsilon": epsilon,
            "delta": delta,
            "rho": rho,
            "neighbour_relation": relation,
            "privacy_unit": PRIVACY_UNIT,
            "composition": settings.composition,
            "theorem": guarantee.theorem,
            "release_time": int(time.time() * 1000),
        }

    def release(self) -> bytes:
        return encode("WindowRelease", self.release_record())
