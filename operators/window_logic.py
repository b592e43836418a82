"""The Flink-free logic of the ``sliding-window`` job: one DPSW-Sketch per shard over Kafka messages.

DPSW-Sketch (Wang–Wang–Chen, KDD 2024; docs/sliding-window.md) with **count-based** windows (the
paper's: the last w items of a shard). A shard is one Kafka partition of the events topic, filled by
the data-independent partitioner (:mod:`privstream.partitioning`: a hash of the item or the user),
which this logic re-checks on every message (:func:`privstream.operators.routing.routing_error`).

:class:`WindowShardLogic` takes the raw bytes of one shard's messages and returns what the operator
emits: dead letters (undecodable or misrouted messages) and, whenever the shard's item count
reaches the end of a substream (a multiple of W), one ``WindowRelease``: the estimates (Alg. 3,
corrected) of the public query set and the γ-heavy hitters of the declared domain (Alg. 3 lines
6–9), with the guarantee (Lemma 4.1, Thm 3.2) and the ledger charge that covers it. Shards release
**independently**; summing their estimates is post-processing of parallel mechanisms.

Its whole state is the core sketch's versioned binary state (:meth:`DPSWSketch.to_bytes`,
:mod:`privstream.window.state`) plus a refusal reason once a misrouted message was seen (fail closed,
as the heavy-hitters job). Noise is keyed: shard s's key is HMAC-SHA256(submission key, s), the
submission key being a CSPRNG secret the launcher draws (tests inject it); the key then lives in the
sketch's state, so a replay after a restore redraws identical noise and a release left in an aborted
Kafka transaction equals its committed replay.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from privstream.connectors.avro_codec import encode
from privstream.connectors.dead_letter import dead_letter_record
from privstream.operators.payloads import EventPayload, PayloadError, decode_payload
from privstream.operators.routing import SHARD_KEYS, routing_error

from privstream.noise.rng import new_noise_key
from privstream.validation import check_int
from privstream.window import DPSWParams, DPSWSketch, dpsw_params

Output = tuple[Literal["release", "state", "dead-letter"], bytes]

PRIVACY_UNIT = "one event (event-level DP; a user with k events is protected with group privacy only)"
COMPOSITION = (
    "each shard releases independently over its own last w items; shards are disjoint sub-streams of a "
    "data-independent partition, so the releases of all shards (and sums of their estimates) are "
    "post-processing of parallel mechanisms and keep the stated (epsilon, delta) (parallel composition)"
)


@dataclass(frozen=True)
class LedgerCharge:
    """The one ledger entry that covers every release of the run (written by the launcher)."""

    ledger_id: str = ""
    sequence: int = 0
    entry_hash: str = ""


@dataclass(frozen=True)
class WindowSettings:
    """The job's public parameters, validated on construction (a bad value names its option)."""

    window: int
    substream: int
    depth: int
    width: int
    epsilon: float
    delta: float
    domain_size: int
    gamma: float
    shards: int
    checkpoints: tuple[int, ...] | None = None
    alpha: float | None = None
    budget_ratio: float | None = None
    hash_seed: int = 0
    queries: tuple[int, ...] | None = None  #: the public query set (default: the whole domain)
    shard_key: str = "item"
    charge: LedgerCharge = field(default_factory=LedgerCharge)
    submission_key: bytes = field(default_factory=new_noise_key, repr=False)  #: secret, per submission

    def __post_init__(self) -> None:
        if self.checkpoints is None and self.alpha is None:
            object.__setattr__(self, "alpha", 0.5)
        if self.checkpoints is not None and self.budget_ratio is None:
            object.__setattr__(self, "budget_ratio", 0.5)
        self.params  # noqa: B018 - validates window, substream, checkpoints/alpha, budget, depth, width
        check_int("domain_size", self.domain_size)
        check_int("shards", self.shards)
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, int | float) or not 0 < self.gamma < 1:
            raise ValueError(f"gamma: must be in (0, 1), got {self.gamma!r}")
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
        )

    @property
    def query_items(self) -> Sequence[int]:
        return range(self.domain_size) if self.queries is None else self.queries

    def neighbour_relation(self) -> str:
        """The relation every release holds for (docs/sliding-window.md, "Flink job")."""
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


class WindowShardLogic:
    """See the module docstring. ``state``: a previous :meth:`to_bytes` (after a restore);
    ``refused``: a previous :attr:`refused` (the operator keeps it in state next to the sketch);
    ``expose_states`` (TESTS ONLY): a ``("state", SketchSnapshot bytes)`` output after every release."""

    def __init__(
        self,
        settings: WindowSettings,
        shard: int,
        state: bytes | None = None,
        refused: str | None = None,
        expose_states: bool = False,
    ) -> None:
        self.settings = settings
        self.expose_states = expose_states
        self.shard = shard
        self.refused = refused
        if state is None:
            self.sketch = settings.new_sketch(shard)
        else:
            self.sketch = DPSWSketch.from_bytes(state, domain=range(settings.domain_size))

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
            return []  # EndMarker / EpochWatermark: count-based windows advance with items only
        error = routing_error(payload, self.shard, self.settings.shards, self.settings.shard_key)
        if error is not None:
            self.refused = error
            return [self._dead_letter(value, f"{error}; this shard releases nothing more", offset, topic)]
        return self.add(payload.items)

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
                out.append(("release", self.release()))
                if self.expose_states:  # TESTS ONLY: the raw state is not private
                    out.append(("state", self.snapshot()))
        return out

    def snapshot(self) -> bytes:
        """TESTS ONLY: the state as a ``SketchSnapshot`` (epoch = the substream just completed)."""
        sketch = self.sketch
        record = {
            "sketch_type": "DPSWSketch",
            "build": "DPSW",
            "shard": self.shard,
            "epoch": sketch.substream_of(sketch.clock),
            "n": sketch.items,
            "data": self.to_bytes(),
            "created_time": int(time.time() * 1000),
        }
        return encode("SketchSnapshot", record)

    def release_record(self) -> dict[str, Any]:
        """The ``WindowRelease`` of the sketch now (Alg. 3 reads only PCMSs of complete ranges)."""
        sketch, settings = self.sketch, self.settings
        guarantee = sketch.guarantee()
        queries = list(settings.query_items)
        estimates = sketch.estimate_batch(queries).tolist()
        if settings.queries is None:  # the queries are the whole domain in order: filter, not re-estimate
            bar = sketch.heavy_threshold(settings.gamma)
            heavy = [(q, e) for q, e in zip(queries, estimates, strict=True) if e >= bar]
        else:
            heavy = sketch.heavy_hitters(settings.gamma)
        return {
            "ledger_id": settings.charge.ledger_id,
            "ledger_sequence": settings.charge.sequence,
            "ledger_entry_hash": settings.charge.entry_hash,
            "shard": self.shard,
            "shards": settings.shards,
            "substream": sketch.substream_of(sketch.clock),
            "position": sketch.clock,
            "window": settings.window,
            "window_start": sketch.window_start(),
            "estimates": [{"item": q, "estimate": int(e)} for q, e in zip(queries, estimates, strict=True)],
            "gamma": float(settings.gamma),
            "heavy_threshold": sketch.heavy_threshold(settings.gamma),
            "heavy_hitters": [{"item": i, "estimate": int(e)} for i, e in heavy],
            "epsilon": float(guarantee.epsilon or settings.epsilon),
            "delta": float(guarantee.delta or settings.delta),
            "rho": float(guarantee.rho),
            "neighbour_relation": settings.neighbour_relation(),
            "privacy_unit": PRIVACY_UNIT,
            "composition": COMPOSITION,
            "theorem": guarantee.theorem,
            "release_time": int(time.time() * 1000),
        }

    def release(self) -> bytes:
        return encode("WindowRelease", self.release_record())
