"""The heavy-hitters job's configuration: typed, validated, free of argv, Flink and Kafka.

:class:`HeavyHittersConfig` holds one field per option of ``privstream run heavy-hitters`` and checks
every field when it is built (also by ``dataclasses.replace``): a bad value raises
:class:`ConfigError`, whose message starts with the command-line option (``--total-epsilon: …``), so
the command line and programmatic callers report the same thing. The objects the operators use are
derived from it: :attr:`~HeavyHittersConfig.spec`, :attr:`~HeavyHittersConfig.policy`,
:attr:`~HeavyHittersConfig.release`.

:class:`TestHooks` (deterministic noise, an injected failure, the pre-noise sketches topic) are TESTS ONLY and no option sets them:
tests pass them to :class:`privstream.jobs.job.HeavyHittersJob`. They live in
:mod:`privstream.operators.test_hooks` (the one switch the operators take) and are re-exported here.

Dependency order of the job modules: ``config`` ← ``pipeline`` ← ``job`` ← ``heavy_hitters`` (the
command line) ← ``cli`` / ``quickstart``.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field
from datetime import timedelta

from privstream.connectors.topics import dead_letter_topic
from privstream.jobs.settings import (
    MS,
    ConfigError,
    FlinkSettings,
    KafkaSettings,
    LedgerSettings,
    ShardSettings,
    check_milliseconds,
    check_sql_value,
    duration,
    option_int,
)
from privstream.operators.epochs import (
    CountEpochs,
    EpochPolicy,
    TimeEpochs,
)
from privstream.operators.release_logic import ReleaseConfig
from privstream.operators.sketch_spec import RELEASE_MODES, SHARD_KEYS, SketchSpec, kind_for
from privstream.operators.test_hooks import TestHooks as TestHooks  # re-exported: tests import it from here

from privstream.mechanisms import registry
from privstream.options import option
from privstream.validation import check_privacy_bound

__all__ = [
    "RELEASE_MODES",
    "SHARD_KEYS",
    "ConfigError",
    "HeavyHittersConfig",
    "TestHooks",
    "mechanism_choices",
]


def mechanism_choices() -> tuple[str, ...]:
    """``--mechanism`` values, read from the live mechanism registry when called (the parser is
    built): "auto" (the valid mechanism with the smallest error bound) or a registered mechanism
    (only those valid for the job's sketches in its release mode are accepted)."""
    return ("auto", *registry.names())


def _real(option: str, value: object, parameter: str) -> float:
    """A privacy parameter (``parameter``: "epsilon" or "delta"): finite, >= 0 (δ < 1) and within
    :func:`~privstream.validation.check_privacy_bound`'s bound."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{option}: must be a number, got {value!r}")
    below = 1.0 if parameter == "delta" else None
    if not math.isfinite(value) or value < 0 or (below is not None and value >= below):
        bound = "" if below is None else f" and < {below:g}"
        raise ConfigError(f"{option}: must be finite, >= 0{bound}, got {value}")
    try:
        check_privacy_bound(option, value, parameter)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return float(value)


def _epoch(text: str, option: str, _args: argparse.Namespace | None = None) -> int | timedelta:
    """``--epoch N`` (events per shard) or ``--epoch 60s`` (tumbling event time)."""
    text = text.strip()
    return int(text) if text.isdigit() else duration(text, option)


def _stop_offsets(text: str, option: str, _args: argparse.Namespace | None = None) -> dict[int, int]:
    out: dict[int, int] = {}
    for part in text.split(","):
        match = re.match(r"^\s*(\d+)\s*[:=]\s*(\d+)\s*$", part)
        if not match:
            raise ConfigError(f"{option}: expected PARTITION:OFFSET[,...], got {part!r}")
        out[int(match.group(1))] = int(match.group(2))
    return out


@dataclass(frozen=True)
class HeavyHittersConfig(KafkaSettings, FlinkSettings, ShardSettings, LedgerSettings):
    """Options of the heavy-hitters job (``privstream run heavy-hitters --help`` explains each; the
    command line is generated from these fields, :mod:`privstream.options`).

    ``epoch``: an int (that many events per shard and epoch) or a ``timedelta`` (tumbling event-time
    epochs closed by ``EpochWatermark`` punctuation, less ``lateness``). ``m`` makes the job
    user-level (PAMG over ``UserSetEvent``). ``None`` defaults: ``total_epsilon``/``total_delta`` =
    one epoch's ε/δ, ``ledger_id`` = ``heavy-hitters/<topic>``, ``dlq_topic`` = ``<topic>-dlq``,
    ``shard_key`` = item (MG) or user (PAMG), ``release_mode`` = per-shard (MG) or merged (PAMG)
    (:mod:`privstream.operators.sketch_spec`), ``checkpoint_dir`` = a new temporary directory.
    ``stop_offsets`` (every partition's end offset) or ``stop_at_end_markers`` (found by a scan before
    the start) bound the run. The Kafka, Flink and ledger settings are the shared ones
    (:mod:`privstream.jobs.settings`)."""

    epsilon: float = field(metadata=option("ε of each epoch's release", kind=float))
    delta: float = field(metadata=option("δ of each epoch's release", kind=float))
    k: int = field(metadata=option("counters per sketch", kind=int))
    epoch: int | timedelta = field(
        metadata=option(
            "N (N events per shard and epoch) or a duration (60s, 5m: tumbling event time)", parse=_epoch
        )
    )
    topic: str = field(
        default="events", metadata=option("events topic (Avro EventBatch/Event or UserSetEvent)")
    )
    lateness: timedelta = field(
        default=timedelta(0),
        metadata=option(
            "event-time epochs: allowed lateness behind the producers' EpochWatermark punctuation "
            "(epochs close on punctuation only, never on event times)",
            parse=duration,
            default_text="0s",
        ),
    )
    m: int | None = field(
        default=None,
        metadata=option("user-level: each UserSetEvent has <= m distinct items (PAMG)", kind=int),
    )
    shard_key: str | None = field(
        default=None,
        metadata=option(
            "what producers hash to pick an event's partition (verified for every event; misrouted "
            "messages are dead-lettered): item (default for MG) or user (always for --m)",
            choices=SHARD_KEYS,
        ),
    )
    release_mode: str | None = field(
        default=None,
        metadata=option(
            "per-shard (default for MG): each shard's Alg. 1 sketch released with PMG, whose threshold "
            "does not grow with k, and the releases summed (parallel composition over the hash "
            "partition); merged (default for --m): the shards' fixed-order merge released with GSHM / "
            "thresholded Laplace",
            choices=RELEASE_MODES,
        ),
    )
    mechanism: str = field(
        default="auto",
        metadata=option(
            "release mechanism: auto (the valid one with the smallest error bound) or one valid for "
            "the job's sketches in its release mode (the others are refused with the reason and the "
            "valid choices)",
            choices=mechanism_choices,
        ),
    )
    ledger_lease: timedelta = field(
        default=timedelta(seconds=60),
        metadata=option(
            "a running job writes a heartbeat to the ledger topic every third of this; a start-up that "
            "finds another writer of the same ledger id alive less than this ago waits up to this long "
            "for its next heartbeat and refuses to start if it comes (a second live job). A restart "
            "right after a stop waits up to this once",
            parse=duration,
        ),
    )
    releases_topic: str = field(
        default="releases", metadata=option("where releases go (Release, ReleaseRefused)")
    )
    dlq_topic: str | None = field(
        default=None, metadata=option("dead-letter topic", default_text="<topic>-dlq")
    )
    stop_offsets: dict[int, int] | None = field(
        default=None,
        metadata=option("bounded run: PARTITION:END_OFFSET for every partition", parse=_stop_offsets),
    )
    stop_at_end_markers: bool = field(
        default=False,
        metadata=option(
            "bounded run: stop each partition after its EndMarker (found by a scan before the start)",
            switch=True,
        ),
    )
    group_id: str = field(
        default="privstream-heavy-hitters", metadata=option("the Kafka consumer group of the source")
    )
    job_name: str = field(default="privstream-heavy-hitters", kw_only=True)

    def __post_init__(self) -> None:
        self.check_kafka(
            ("--topic", self.topic),
            ("--releases-topic", self.releases_topic),
            ("--dlq-topic", self.dlq_topic),
        )
        check_sql_value("--group-id", self.group_id)
        self._check_sketch()
        self._check_epochs()
        self._check_release()
        self._check_run()

    def _check_sketch(self) -> None:
        option_int("--k", self.k, 1)
        if self.m is not None and not 1 <= option_int("--m", self.m, 1) < self.k:
            raise ConfigError(f"--m: PAMG needs 1 <= m < k={self.k}, got {self.m}")
        if self.shard_key not in (None, *SHARD_KEYS):
            raise ConfigError(f"--shard-key: expected one of {SHARD_KEYS}, got {self.shard_key!r}")
        if self.release_mode not in (None, *RELEASE_MODES):
            raise ConfigError(f"--release-mode: expected one of {RELEASE_MODES}, got {self.release_mode!r}")
        if self.m is not None and self.shard_key == "item":
            raise ConfigError(
                "--shard-key: a user-level job (--m) shards by user: one user's sets in one shard"
            )

    def _check_epochs(self) -> None:
        if isinstance(self.epoch, timedelta):
            check_milliseconds("--epoch", self.epoch, 1)
        elif isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or self.epoch < 1:
            raise ConfigError(
                f"--epoch: expected events per shard (an int >= 1) or a timedelta, got {self.epoch!r}"
            )
        check_milliseconds("--lateness", self.lateness, 0)  # checked with count epochs too, which ignore it

    def _check_release(self) -> None:
        epsilon = _real("--epsilon", self.epsilon, "epsilon")
        delta = _real("--delta", self.delta, "delta")
        if (
            self.total_epsilon is not None
            and _real("--total-epsilon", self.total_epsilon, "epsilon") < epsilon
        ):
            raise ConfigError(
                f"--total-epsilon: the ledger total ε={self.total_epsilon:g} is smaller than one "
                f"epoch's release (--epsilon {epsilon:g})"
            )
        if self.total_delta is not None and _real("--total-delta", self.total_delta, "delta") < delta:
            raise ConfigError(
                f"--total-delta: the ledger total δ={self.total_delta:g} is smaller than one "
                f"epoch's release (--delta {delta:g})"
            )
        self.check_ledger()
        self._check_mechanism()

    def _check_mechanism(self) -> None:
        """Refuse a ``--mechanism`` that the release entry point would refuse for this job's
        sketches in its release mode (a shard's sketch per shard, the merged sketch merged), listing
        the valid choices. The entry point's own checks answer for an empty sketch of the job's kind
        (same build, k and m), under the per-epoch budget; nothing is charged and no noise is drawn.
        (Count epochs calibrate to a smaller ε and δ by group privacy, which changes no mechanism's
        applicability: that depends on ε, δ > 0.)"""
        from privstream.accounting import Budget

        problem = self.spec.mechanism_problem(self.mechanism, Budget(self.epsilon, self.delta))
        if problem is not None:
            arguments, reason = problem
            raise ConfigError(f"{'/'.join(f'--{a}' for a in arguments)}: {reason}")

    def _check_run(self) -> None:
        if self.stop_offsets is not None:
            if self.stop_at_end_markers:
                raise ConfigError("--stop-at-end-markers: give either it or --stop-offsets, not both")
            if isinstance(self.epoch, timedelta):
                raise ConfigError(
                    "--stop-offsets: stops at positions in each partition, so with time epochs which "
                    "punctuation a shard reads last (and so which epochs it releases) would depend on the "
                    "events before it: one removed event moves it. Use --stop-at-end-markers, or run unbounded"
                )
            for partition, offset in self.stop_offsets.items():
                option_int("--stop-offsets", partition, 0)
                option_int("--stop-offsets", offset, 0)
        self.check_parallelism()
        self.check_flink()
        check_milliseconds("--ledger-lease", self.ledger_lease, 3)
        if self.ledger_lease < 3 * self.checkpoint_interval:
            raise ConfigError(
                f"--ledger-lease: must be at least 3 x --checkpoint-interval ({3 * self.checkpoint_interval}), "
                f"got {self.ledger_lease}: a start-up cannot read past the job's open ledger transaction "
                "before its checkpoint commits, so heartbeats behind it are seen that late"
            )

    @property
    def spec(self) -> SketchSpec:
        """The shard sketch: the registered event-level kind (MG), or with ``m`` the user-level one (PAMG)."""
        kind = kind_for(user_level=self.m is not None)
        return SketchSpec(kind.name, self.k, self.m, self.shard_key, self.release_mode)

    @property
    def policy(self) -> EpochPolicy:
        """Count epochs, or time epochs closed by the producers' punctuation (never by the data)."""
        if not isinstance(self.epoch, timedelta):
            return CountEpochs(self.epoch)
        return TimeEpochs(self.epoch // MS, self.lateness // MS)

    @property
    def release(self) -> ReleaseConfig:
        """Per-epoch budget, ledger total and ledger id (noise from the CSPRNG: no test seed)."""
        return ReleaseConfig(
            epsilon=self.epsilon,
            delta=self.delta,
            total_epsilon=self.epsilon if self.total_epsilon is None else self.total_epsilon,
            total_delta=self.delta if self.total_delta is None else self.total_delta,
            ledger_id=self.ledger_id or f"heavy-hitters/{self.topic}",
            mechanism=self.mechanism,
        )

    @property
    def dlq(self) -> str:
        """The dead-letter topic."""
        return self.dlq_topic or dead_letter_topic(self.topic)
