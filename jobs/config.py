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

import math
import re
from dataclasses import dataclass
from datetime import timedelta

from privstream.connectors.clients import parse_bootstrap
from privstream.connectors.topics import dead_letter_topic
from privstream.connectors.validation import sql_option_value
from privstream.operators.epochs import (
    CountEpochs,
    EpochPolicy,
    TimeEpochs,
)
from privstream.operators.release_logic import ReleaseConfig
from privstream.operators.sketch_spec import RELEASE_MODES, SHARD_KEYS, SketchSpec, kind_for
from privstream.operators.test_hooks import TestHooks as TestHooks  # re-exported: tests import it from here

from privstream.mechanisms import registry
from privstream.validation import check_privacy_bound


def mechanism_choices() -> tuple[str, ...]:
    """``--mechanism`` values, read from the live mechanism registry when called (the parser is
    built): "auto" (the valid mechanism with the smallest error bound) or a registered mechanism
    (only those valid for the job's sketches in its release mode are accepted)."""
    return ("auto", *registry.names())


_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's legal topic names
_MS = timedelta(milliseconds=1)


class ConfigError(ValueError):
    """A bad option; the message starts with the command-line option's name."""


def _int(option: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{option}: must be an int, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{option}: must be >= {minimum}, got {value}")
    return value


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


def _milliseconds(option: str, value: object, minimum: int) -> int:
    if not isinstance(value, timedelta):
        raise ConfigError(f"{option}: must be a datetime.timedelta, got {value!r}")
    if value % _MS or value < minimum * _MS:
        raise ConfigError(f"{option}: must be a whole number of ms >= {minimum} ms, got {value}")
    return value // _MS


def _topic(option: str, value: object) -> None:
    if not isinstance(value, str) or not _TOPIC_NAME.match(value):
        raise ConfigError(
            f"{option}: a Kafka topic name is 1-249 of letters, digits and . _ -, got {value!r}"
        )


def _sql_value(option: str, value: str) -> None:
    """It goes verbatim into the Flink SQL source's options (the source applies the same rule)."""
    try:
        sql_option_value(value, option)  # its message starts with the name it is given
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class HeavyHittersConfig:
    """Options of the heavy-hitters job (``privstream run heavy-hitters --help`` explains each).

    ``epoch``: an int (that many events per shard and epoch) or a ``timedelta`` (tumbling event-time
    epochs closed by ``EpochWatermark`` punctuation, less ``lateness``). ``m`` makes the job
    user-level (PAMG over ``UserSetEvent``). ``None`` defaults: ``total_epsilon``/``total_delta`` =
    one epoch's ε/δ, ``ledger_id`` = ``heavy-hitters/<topic>``, ``dlq_topic`` = ``<topic>-dlq``,
    ``shard_key`` = item (MG) or user (PAMG), ``release_mode`` = per-shard (MG) or merged (PAMG)
    (:mod:`privstream.operators.sketch_spec`), ``checkpoint_dir`` = a new temporary directory.
    ``stop_offsets`` (every partition's end offset) or ``stop_at_end_markers`` (found by a scan before
    the start) bound the run."""

    epsilon: float
    delta: float
    k: int
    epoch: int | timedelta
    bootstrap: str = "127.0.0.1:9092"
    topic: str = "events"
    lateness: timedelta = timedelta(0)
    m: int | None = None
    shard_key: str | None = None
    release_mode: str | None = None
    mechanism: str = "auto"
    total_epsilon: float | None = None
    total_delta: float | None = None
    ledger_id: str | None = None
    releases_topic: str = "releases"
    ledger_topic: str = "ledger"
    ledger_timeout: timedelta = timedelta(seconds=60)
    ledger_lease: timedelta = timedelta(seconds=60)
    dlq_topic: str | None = None
    stop_offsets: dict[int, int] | None = None
    stop_at_end_markers: bool = False
    group_id: str = "privstream-heavy-hitters"
    parallelism: int = 1
    checkpoint_interval: timedelta = timedelta(seconds=2)
    bundle_size: int = 200
    checkpoint_dir: str | None = None
    flink_conf: tuple[tuple[str, str], ...] = ()
    restore_from: str | None = None
    restart_attempts: int = 3
    job_name: str = "privstream-heavy-hitters"

    def __post_init__(self) -> None:
        self._check_kafka_names()
        self._check_sketch()
        self._check_epochs()
        self._check_release()
        self._check_run()

    def _check_kafka_names(self) -> None:
        try:
            parse_bootstrap(self.bootstrap)
        except ValueError:
            raise ConfigError(
                f"--bootstrap: expected host:port[,host:port...], got {self.bootstrap!r}"
            ) from None
        _sql_value("--bootstrap", self.bootstrap)
        _sql_value("--group-id", self.group_id)
        _topic("--topic", self.topic)
        for option, topic in (
            ("--releases-topic", self.releases_topic),
            ("--ledger-topic", self.ledger_topic),
            ("--dlq-topic", self.dlq_topic),
        ):
            if topic is not None:
                _topic(option, topic)

    def _check_sketch(self) -> None:
        _int("--k", self.k, 1)
        if self.m is not None and not 1 <= _int("--m", self.m, 1) < self.k:
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
            _milliseconds("--epoch", self.epoch, 1)
        elif isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or self.epoch < 1:
            raise ConfigError(
                f"--epoch: expected events per shard (an int >= 1) or a timedelta, got {self.epoch!r}"
            )
        _milliseconds("--lateness", self.lateness, 0)  # checked with count epochs too, which ignore it

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
        if self.ledger_id is not None and (not isinstance(self.ledger_id, str) or not self.ledger_id):
            raise ConfigError(f"--ledger-id: must be a non-empty string, got {self.ledger_id!r}")
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
                _int("--stop-offsets", partition, 0)
                _int("--stop-offsets", offset, 0)
        _int("--parallelism", self.parallelism, 1)
        _int("--bundle-size", self.bundle_size, 1)
        _int("--restart-attempts", self.restart_attempts, 0)
        _milliseconds("--checkpoint-interval", self.checkpoint_interval, 1)
        _milliseconds("--ledger-timeout", self.ledger_timeout, 1)
        _milliseconds("--ledger-lease", self.ledger_lease, 3)
        if self.ledger_lease < 3 * self.checkpoint_interval:
            raise ConfigError(
                f"--ledger-lease: must be at least 3 x --checkpoint-interval ({3 * self.checkpoint_interval}), "
                f"got {self.ledger_lease}: a start-up cannot read past the job's open ledger transaction "
                "before its checkpoint commits, so heartbeats behind it are seen that late"
            )
        for pair in self.flink_conf:
            if len(pair) != 2 or not all(isinstance(part, str) for part in pair) or not pair[0].strip():
                raise ConfigError(f"--flink-conf: expected (KEY, VALUE) string pairs, got {pair!r}")
        if not self.job_name:
            raise ConfigError("job_name: must be a non-empty string")  # no option: programmatic only

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
        return TimeEpochs(self.epoch // _MS, self.lateness // _MS)

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

    @property
    def checkpoint_interval_ms(self) -> int:
        return self.checkpoint_interval // _MS
