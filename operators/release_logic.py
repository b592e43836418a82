"""The release step of the heavy-hitters job, free of Flink: charge the ledger, add noise, encode.

For each epoch's release input (:class:`~privstream.operators.shard_logic.EpochReleaseInput`: the
shard sketches in shard order, or their fixed-order merge, as the spec's ``combine`` decides) the
:class:`EpochReleaser` calls a release entry point with the
:class:`~privstream.accounting.PrivacyLedger`, which is charged once before any noise is drawn (an
epoch the budget refuses is not released: a ``ReleaseRefused`` "budget exhausted" record takes its
place on the releases topic, and the job carries on): per shard (the MG default),
:func:`privstream.mechanisms.release_disjoint` releases every shard's sequential Alg. 1 sketch
(PMG) and sums them (parallel composition over the hash partition); merged,
:func:`privstream.mechanisms.release` releases the fixed-order merge (``Build.MERGED`` /
``PAMG_MERGED``: GSHM or thresholded Laplace, never PMG). With count epochs the epoch size is a
public bound on each shard's events, passed as ``n_bound`` (``auto`` weighs systematic terms with
it). The result is encoded as an Avro ``Release`` plus the charge's hash-chained ``LedgerEntry`` for the
compacted ledger topic (:mod:`privstream.connectors.ledger_topic`).

Composition: an event-level (MG) job releases disjoint epochs, which compose in parallel
(``parallel_epochs``); a user-level (PAMG) job's users recur across epochs, so its ledger composes
sequentially. Count epochs cut each shard's stream by position, so their releases state the
"replace one record, stream lengths public" relation and are calibrated for its remove + add by
group privacy (``release(..., group_size=2)``, Lebeda-Tetek Lemma 8.1).

The neighbour relation is composed as a structured value
(:class:`~privstream.privacy.NeighbourRelation`): the merged build's relation with the group size
(from :func:`~privstream.mechanisms.release`), then the epoch policy's
(``policy.neighbour_relation``: count epochs turn it into a same-shard replacement), then the shard conditions (``spec.shard_relation``); it is
rendered to text only in the Avro record (:func:`release_record`).

Noise (restarts): each epoch's noise comes from a :class:`~privstream.noise.rng.KeyedRandomSource`
keyed by a 256-bit secret drawn once from the OS CSPRNG and kept in the release operator's
checkpointed state. An epoch replayed after a failure therefore redraws identical noise on an
identical merged sketch, so a release left behind in an aborted Kafka transaction equals its
committed replay and a ``read_uncommitted`` reader learns nothing more. The source's context
binds the epoch, a SHA-256 of the release input and every release parameter, so a replay that is
*not* identical (other options after a restore, other data) draws independent noise, never the
same noise on a different input (whose difference would reveal exact counts). Only tests pass
``hooks`` (:class:`~privstream.operators.test_hooks.TestHooks`) with a ``noise_seed``: a public
per-epoch :class:`~privstream.noise.rng.SeededRandomSource`; :class:`ReleaseConfig` has no such field.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from privstream.connectors.avro_codec import encode
from privstream.connectors.ledger_topic import entry_record
from privstream.operators.epochs import EpochPolicy, TimeEpochs
from privstream.operators.shard_logic import EpochReleaseInput
from privstream.operators.sketch_spec import SketchSpec
from privstream.operators.test_hooks import TestHooks

from privstream.accounting import Budget, BudgetExceeded, PrivacyLedger, most_advanced, parallel_epochs
from privstream.mechanisms.release_types import Release
from privstream.noise.rng import KeyedRandomSource, RandomSource, SeededRandomSource

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReleaseRefusal:
    """An epoch the ledger refused (budget exhausted): published in the release's place, nothing
    charged. :meth:`record` is the Avro ``ReleaseRefused`` record."""

    reason: str
    detail: str
    ledger_id: str
    epoch: int
    window_start: int | None
    window_end: int | None
    epsilon_requested: float
    delta_requested: float
    epsilon_spent: float
    delta_spent: float
    epsilon_total: float
    delta_total: float
    refused_time: int

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReleaseConfig:
    """Per-epoch budget, ledger total and identity, and the mechanism (production settings only:
    test-only behaviour such as seeded noise comes through :class:`~privstream.operators.test_hooks.TestHooks`)."""

    epsilon: float
    delta: float
    total_epsilon: float
    total_delta: float
    ledger_id: str
    mechanism: str = "auto"

    def __post_init__(self) -> None:
        Budget(self.epsilon, self.delta)  # validates, naming the parameter
        if self.total_epsilon < self.epsilon or self.total_delta < self.delta:
            raise ValueError(
                f"total_epsilon/total_delta: the ledger total ({self.total_epsilon}, {self.total_delta}) "
                f"is smaller than one release ({self.epsilon}, {self.delta})"
            )
        if not self.ledger_id:
            raise ValueError("ledger_id: must be a non-empty string")


class EpochReleaser:
    """Charge, release, encode. ``ledger`` is the state the operator checkpoints; ``hooks``: TESTS
    ONLY (a ``noise_seed`` makes the noise deterministic), None in production."""

    def __init__(
        self,
        config: ReleaseConfig,
        spec: SketchSpec,
        policy: EpochPolicy,
        ledger_bytes: bytes | None = None,
        noise_key: bytes | None = None,
        hooks: TestHooks | None = None,
    ) -> None:
        self.config = config
        self.hooks = hooks
        self.spec = spec
        self.policy = policy
        self.noise_key = noise_key
        self.ledger = (
            PrivacyLedger.from_bytes(ledger_bytes) if ledger_bytes else new_ledger(config, spec, policy)
        )

    def _rng(self, merged: EpochReleaseInput) -> RandomSource | None:
        """The epoch's noise source. The keyed source's context binds the epoch, the exact release
        input and every release parameter: only an identical replay redraws identical noise, and a
        replay that differs in anything (changed options after a restore, other data) gets
        independent noise, never the same noise on different inputs."""
        seeded = None if self.hooks is None else self.hooks.release_noise_context(merged.epoch)
        if seeded is not None:  # TESTS ONLY: a public seed
            return SeededRandomSource(seeded)
        if self.noise_key is None:
            return None  # the release entry point then uses the CSPRNG
        context = (
            f"heavy-hitters epoch {merged.epoch} sketch {hashlib.sha256(merged.data).hexdigest()} "
            f"mechanism {self.config.mechanism} epsilon {self.config.epsilon!r} delta {self.config.delta!r} "
            f"group {self.policy.group_size} ledger {self.ledger.ledger_id}"
        )
        return KeyedRandomSource(self.noise_key, context)  # key: CSPRNG secret in checkpointed state

    def release(self, merged: EpochReleaseInput) -> tuple[bytes | None, bytes | None]:
        """The job's edge: :meth:`decide`, encoded. ``(message for the releases topic, Avro
        LedgerEntry or None)``: a ``Release`` and its charge's entry; a ``ReleaseRefused`` ("budget
        exhausted") and None when the budget refuses the epoch; None and None for an epoch refused on
        its input (nothing charged either way)."""
        outcome, entry = self.decide(merged)
        if outcome is None:
            return None, None
        return encode_outcome(outcome, self.policy), entry

    def decide(self, merged: EpochReleaseInput) -> tuple[Release | ReleaseRefusal | None, bytes | None]:
        """The typed outcome of epoch ``merged``: its :class:`~privstream.mechanisms.Release` (the
        path's whole relation, ``epoch`` set) and the charge's Avro ``LedgerEntry``; a
        :class:`ReleaseRefusal` and None when the budget refuses it; None and None for an epoch
        refused on its input (nothing charged either way)."""
        from privstream.mechanisms import release, release_disjoint

        if merged.refused is not None:  # fail closed: the input cannot support the stated relation
            logger.error("release of epoch %s refused: %s", merged.epoch, merged.refused)
            return None, None
        budget = Budget(self.config.epsilon, self.config.delta)
        shard_bound = self.policy.shard_events_bound  # public (count epochs), else None
        if shard_bound is not None and self.spec.m is not None:
            shard_bound *= self.spec.m  # PAMG's sketch term counts items: <= m per user set
        common = {
            "mechanism": self.config.mechanism,
            "rng": self._rng(merged),
            "epoch": merged.epoch,
            "ledger": self.ledger,
            "label": "heavy-hitters",
            "group_size": self.policy.group_size,
        }
        try:  # the entry points charge the ledger before they draw noise
            if self.spec.per_shard:  # each shard's sketch on its own, summed (parallel composition)
                result = release_disjoint(
                    self.spec.load_release_input(merged.data),  # type: ignore[arg-type]
                    budget,
                    keys_disjoint=self.spec.keys_disjoint,
                    n_bound=shard_bound,
                    **common,  # type: ignore[arg-type]
                )
            else:
                n_bound = None if shard_bound is None else shard_bound * merged.shards
                result = release(self.spec.load_merged(merged.data), budget, n_bound=n_bound, **common)  # type: ignore[arg-type]
        except BudgetExceeded as exc:
            return self._budget_exhausted(merged.epoch, exc), None
        # the path's relation: the merged build's (with the group size), then the epochs, then the shards
        relation = self.policy.neighbour_relation(result.relation).with_conditions(*self.spec.shard_relation)
        return replace(result, relation=relation), self._ledger_entry()

    def _ledger_entry(self) -> bytes:
        """The Avro ``LedgerEntry`` of the charge just made (the ledger's head entry)."""
        head = self.ledger.head
        assert head is not None  # a release was just charged
        return entry_record(head)

    def _budget_exhausted(self, epoch: int, exc: BudgetExceeded) -> ReleaseRefusal:
        """What is published instead of epoch ``epoch``'s release; logged as an error once per
        ledger and process (every refused epoch after that at INFO): an exhausted budget stops
        releases, never the job."""
        spent, total = self.ledger.spent(), self.ledger.total
        assert isinstance(spent, Budget) and isinstance(total, Budget)  # the job's ledgers are (ε, δ)
        window = _window(epoch, self.policy)
        detail = (
            f"ledger {self.ledger.ledger_id!r} has spent (ε={spent.epsilon:g}, δ={spent.delta:g}) of "
            f"(ε={total.epsilon:g}, δ={total.delta:g}); epoch {epoch} needs (ε={self.config.epsilon:g}, "
            f"δ={self.config.delta:g}). Nothing more is released under this ledger id; the job keeps "
            "consuming. A new budget needs a new --ledger-id"
        )
        if self.ledger.ledger_id not in _EXHAUSTED_LOGGED:
            _EXHAUSTED_LOGGED.add(self.ledger.ledger_id)
            logger.error("budget exhausted: %s (%s)", detail, exc)
        else:
            logger.info("budget exhausted: epoch %s not released", epoch)
        return ReleaseRefusal(
            reason=BUDGET_EXHAUSTED,
            detail=detail,
            ledger_id=self.ledger.ledger_id,
            epoch=epoch,
            window_start=None if window is None else window[0],
            window_end=None if window is None else window[1],
            epsilon_requested=float(self.config.epsilon),
            delta_requested=float(self.config.delta),
            epsilon_spent=float(spent.epsilon),
            delta_spent=float(spent.delta),
            epsilon_total=float(total.epsilon),
            delta_total=float(total.delta),
            refused_time=int(time.time() * 1000),
        )


BUDGET_EXHAUSTED = "budget exhausted"  #: ``ReleaseRefused.reason`` when the ledger refuses an epoch
_EXHAUSTED_LOGGED: set[str] = set()  # ledger ids whose exhaustion this process has logged as an error


def new_ledger(config: ReleaseConfig, spec: SketchSpec, policy: EpochPolicy) -> PrivacyLedger:
    """The empty ledger of a job: ``config``'s id and total; an event-level job's disjoint epochs
    compose in parallel, a user-level job's sequentially (users recur across epochs). A parallel
    ledger names ``policy``'s epoch boundaries (:func:`~privstream.accounting.parallel_epochs`), so
    a graph that cuts epochs differently cannot charge it: epoch numbers of two partitions are not
    the same slices of the data."""
    composition = "sequential" if spec.user_sets else parallel_epochs(policy.ledger_partition)
    total = Budget(config.total_epsilon, config.total_delta)
    return PrivacyLedger(total, composition=composition, ledger_id=config.ledger_id)


def reconcile_ledgers(stored: bytes | None, initial: bytes | None) -> bytes | None:
    """The more advanced of the operator's restored ledger and the one read from the ledger topic
    at start-up (the higher sequence number; :func:`privstream.accounting.most_advanced` raises if
    they diverge), written from now on by the start-up's writer (``initial``'s)."""
    if stored is None or initial is None:
        return stored if initial is None else initial
    if stored == initial:
        return stored
    topic = PrivacyLedger.from_bytes(initial)
    chosen = most_advanced(PrivacyLedger.from_bytes(stored), topic)
    chosen.writer = topic.writer
    return chosen.to_bytes()


def _window(epoch: int, policy: EpochPolicy) -> tuple[int, int] | None:
    """A time epoch's ``[start, end)`` in ms, None for count epochs."""
    return (
        (epoch * policy.length_ms, (epoch + 1) * policy.length_ms) if isinstance(policy, TimeEpochs) else None
    )


def encode_outcome(outcome: Release | ReleaseRefusal, policy: EpochPolicy) -> bytes:
    """The job's edge: an epoch's typed outcome (:meth:`EpochReleaser.decide`) as its releases-topic
    message, an Avro ``Release`` or ``ReleaseRefused``."""
    if isinstance(outcome, ReleaseRefusal):
        return encode("ReleaseRefused", outcome.record())
    if outcome.epoch is None:
        raise ValueError("outcome: a release of the heavy-hitters path carries its epoch")
    return encode("Release", release_record(outcome, outcome.epoch, policy))


def release_record(result: Any, epoch: int, policy: EpochPolicy) -> dict[str, Any]:
    """The Avro ``Release`` record of a :class:`privstream.mechanisms.Release`: the relation is
    rendered to text here (the edge), and the whole error bound travels as an ``ErrorBound`` record."""
    window = _window(epoch, policy)
    return {
        "items": [{"item": item, "count": int(count)} for item, count in result.items],
        "epsilon": float(result.epsilon),
        "delta": float(result.delta),
        "mechanism": str(result.mechanism),
        "neighbour_relation": result.relation.render(),
        "privacy_unit": str(result.privacy_unit),
        "epoch": epoch,
        "window_start": None if window is None else window[0],
        "window_end": None if window is None else window[1],
        "error_bound": result.error_bound.to_dict(),  # the Avro ErrorBound record's fields
        "release_time": int(time.time() * 1000),
    }


def noise_error(error_bound: dict[str, Any] | float) -> float:
    """max(below, above) of a decoded ``Release.error_bound``: an ``ErrorBound`` record, or the bare
    double of a message written with ``Release.v1`` (which held exactly that number)."""
    if isinstance(error_bound, dict):
        return max(float(error_bound["below"]), float(error_bound["above"]))
    return float(error_bound)
