"""The settings every job shares, declared once: Kafka, Flink and the privacy ledger.

Each job's config (:class:`~privstream.jobs.config.HeavyHittersConfig`,
:class:`~privstream.jobs.sliding_window.SlidingWindowConfig`,
:class:`~privstream.jobs.continual_monitor.ContinualConfig`,
:class:`~privstream.jobs.ldp_heavy_hitters.LdpJobConfig`) is composed of these classes and its own
fields; its command line is generated from the fields (:mod:`privstream.options`), so an option such
as ``--checkpoint-interval`` or ``--bootstrap`` (default ``$PRIVSTREAM_BOOTSTRAP``) has one
declaration, one default, one check and one meaning in every job. A bad value raises
:class:`ConfigError`, whose message starts with the option (``--ledger-lease: …``).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from datetime import timedelta

from privstream.connectors.clients import BOOTSTRAP_ENV, default_bootstrap, parse_bootstrap
from privstream.connectors.validation import parse_duration_ms, sql_option_value

from privstream.options import option
from privstream.validation import check_privacy_bound

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's legal topic names
MS = timedelta(milliseconds=1)


class ConfigError(ValueError):
    """A bad option; the message starts with the command-line option's name."""


def option_int(option: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{option}: must be an int, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{option}: must be >= {minimum}, got {value}")
    return value


def check_milliseconds(option: str, value: object, minimum: int) -> int:
    """A ``timedelta`` of whole milliseconds, at least ``minimum`` ms; returns the ms."""
    if not isinstance(value, timedelta):
        raise ConfigError(f"{option}: must be a datetime.timedelta, got {value!r}")
    if value % MS or value < minimum * MS:
        raise ConfigError(f"{option}: must be a whole number of ms >= {minimum} ms, got {value}")
    return value // MS


def check_topic(option: str, value: object) -> None:
    if not isinstance(value, str) or not _TOPIC_NAME.match(value):
        raise ConfigError(
            f"{option}: a Kafka topic name is 1-249 of letters, digits and . _ -, got {value!r}"
        )


def check_sql_value(option: str, value: str) -> None:
    """It goes verbatim into the Flink SQL source's options (the source applies the same rule)."""
    try:
        sql_option_value(value, option)  # its message starts with the name it is given
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def duration(text: str, option: str, _args: argparse.Namespace | None = None) -> timedelta:
    """``500ms`` / ``30s`` / ``5m`` / ``1h`` / ``1d`` as a ``timedelta`` (ConfigError naming ``option``)."""
    try:
        return timedelta(milliseconds=parse_duration_ms(text, option))
    except ValueError as exc:  # its message starts with the option it is given
        raise ConfigError(str(exc)) from None


def flink_conf_pair(text: str, option: str, _args: argparse.Namespace | None = None) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"{option}: expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


@dataclass(frozen=True, kw_only=True)
class KafkaSettings:
    """Where the job's topics live."""

    bootstrap: str = field(
        default_factory=default_bootstrap,
        metadata=option(
            "Kafka bootstrap servers host:port[,host:port]",
            default_text=f"${BOOTSTRAP_ENV} if set, else 127.0.0.1:9092",
        ),
    )

    def check_kafka(self, *topics: tuple[str, str | None]) -> None:
        """The bootstrap servers, and each (option, topic name) given (None: derived later)."""
        try:
            parse_bootstrap(self.bootstrap)
        except ValueError:
            raise ConfigError(
                f"--bootstrap: expected host:port[,host:port...], got {self.bootstrap!r}"
            ) from None
        check_sql_value("--bootstrap", self.bootstrap)
        for name, topic in topics:
            if topic is not None:
                check_topic(name, topic)


@dataclass(frozen=True, kw_only=True)
class FlinkSettings:
    """How Flink runs the job: checkpoints, restarts, bundles, extra configuration."""

    checkpoint_interval: timedelta = field(
        default=timedelta(seconds=2),
        metadata=option("how often Flink checkpoints (exactly-once sinks commit then)", parse=duration),
    )
    checkpoint_dir: str | None = field(
        default=None,
        metadata=option("checkpoint/savepoint directory", default_text="a new temporary directory"),
    )
    restart_attempts: int = field(
        default=3, metadata=option("attempts of the fixed-delay restart strategy", kind=int)
    )
    bundle_size: int = field(
        default=200,
        metadata=option(
            "messages per Python bundle (python.fn-execution.bundle.size); each message is a batch",
            kind=int,
        ),
    )
    restore_from: str | None = field(
        default=None, metadata=option("a savepoint or retained checkpoint to resume from")
    )
    flink_conf: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata=option(
            "extra Flink configuration (repeatable), e.g. taskmanager.numberOfTaskSlots=2",
            parse=flink_conf_pair,
            repeat=True,
            metavar="KEY=VALUE",
        ),
    )
    job_name: str = "privstream"  #: no option: each job names itself

    @property
    def checkpoint_interval_ms(self) -> int:
        return self.checkpoint_interval // MS

    def check_flink(self) -> None:
        option_int("--bundle-size", self.bundle_size, 1)
        option_int("--restart-attempts", self.restart_attempts, 0)
        check_milliseconds("--checkpoint-interval", self.checkpoint_interval, 1)
        for pair in self.flink_conf:
            if len(pair) != 2 or not all(isinstance(part, str) for part in pair) or not pair[0].strip():
                raise ConfigError(f"--flink-conf: expected (KEY, VALUE) string pairs, got {pair!r}")
        if not self.job_name:
            raise ConfigError("job_name: must be a non-empty string")  # no option: programmatic only


@dataclass(frozen=True, kw_only=True)
class ShardSettings:
    """How many parallel instances run the job's per-shard operator (docs/deploy.md, "Scaling out").

    A job's shards are its input topic's partitions; the per-shard operator is keyed by the shard,
    so Flink assigns each shard to one of ``parallelism`` sub-tasks (by the hash of the key into
    key groups) and each shard's state lives in exactly one slot. The operators that see the whole
    stream (the fixed-order merge, the release and its ledger, the continual aggregator, the sinks)
    run once. Which slot holds a shard changes nothing released: the state, the noise keys and the
    merge order are per shard."""

    parallelism: int = field(
        default=1,
        metadata=option(
            "parallel instances of the per-shard operator (at most the topic's partitions are busy)",
            kind=int,
        ),
    )

    def check_parallelism(self) -> None:
        option_int("--parallelism", self.parallelism, 1)


@dataclass(frozen=True, kw_only=True)
class LedgerSettings:
    """The privacy ledger the job charges before any release (read to its end first: fail closed)."""

    ledger_topic: str = field(default="ledger", metadata=option("the privacy ledger's topic"))
    ledger_id: str | None = field(default=None, metadata=option("ledger id", default_text="<job>/<topic>"))
    total_epsilon: float | None = field(
        default=None, metadata=option("ledger total ε", kind=float, default_text="--epsilon")
    )
    total_delta: float | None = field(
        default=None, metadata=option("ledger total δ", kind=float, default_text="--delta")
    )
    ledger_timeout: timedelta = field(
        default=timedelta(seconds=60),
        metadata=option(
            "how long the start-up may take to read the ledger topic to its end; the job refuses to "
            "start if it cannot",
            parse=duration,
        ),
    )

    def check_ledger(self) -> None:
        check_topic("--ledger-topic", self.ledger_topic)
        if self.ledger_id is not None and (not isinstance(self.ledger_id, str) or not self.ledger_id):
            raise ConfigError(f"--ledger-id: must be a non-empty string, got {self.ledger_id!r}")
        for name, value, parameter in (
            ("--total-epsilon", self.total_epsilon, "epsilon"),
            ("--total-delta", self.total_delta, "delta"),
        ):
            try:
                check_privacy_bound(name, value, parameter)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        check_milliseconds("--ledger-timeout", self.ledger_timeout, 1)


def partitions_of(bootstrap: str, topic: str) -> int:
    """``topic``'s partition count (the shards or nodes of a job); ValueError naming ``--topic`` if the
    topic is missing, ``BrokerUnreachable`` if no broker answers."""
    from privstream.connectors.clients import ensure_reachable, kafka_consumer

    ensure_reachable(bootstrap)
    consumer = kafka_consumer(bootstrap)
    try:
        partitions = consumer.partitions_for_topic(topic)
    finally:
        consumer.close()
    if not partitions:
        raise ValueError(f"--topic: topic {topic!r} does not exist on {bootstrap}")
    return len(partitions)
