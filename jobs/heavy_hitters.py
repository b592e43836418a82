"""The central heavy-hitters job: MG (or PAMG) per shard → fixed-order merge → one noisy release per epoch.

::

    python -m privstream.jobs.heavy_hitters --bootstrap 127.0.0.1:9092 --topic events \\
        --epsilon 1 --delta 1e-6 --k 64 --epoch 100000          # 100000 events per shard and epoch
    privstream run heavy-hitters ... --epoch 60s --lateness 5s   # tumbling event-time epochs, closed
                                                                 # by EpochWatermark punctuation
    privstream run heavy-hitters ... --m 8                       # user sets (UserSetEvent) with PAMG

Pipeline (PyFlink DataStream; see ``docs/stack-facts.md``)::

    KafkaSource(events, raw bytes + partition + offset)          offsets in checkpoints
      → key_by(partition) → ShardSketchFunction                  keyed state = epoch sketches
            └─ side output: dead letters → <topic>-dlq           (undecodable, late, rejected)
      → key_by(0) → EpochMergeFunction                            fixed shard-id order merge
      → key_by(0) → ReleaseFunction                               ledger in state, release entry point
            ├─ main: Avro Release → releases                      KafkaSink EXACTLY_ONCE
            └─ side: LedgerEntry keyed by ledger id → ledger       KafkaSink EXACTLY_ONCE (compacted)

Shards are the topic's partitions, which producers must choose by a hash of the item (or of the
user: ``--shard-key user``, always for PAMG); the job recomputes the hash of every event and
dead-letters misrouted messages, because position-based partitioning breaks the neighbour relation. Each Kafka message should be an ``EventBatch`` (micro-batch): per-record Python is
~10^4 records/s here, batched messages reach ~10^5–10^6 events/s (``benchmarks/bench_flink.py``).
Releases of merged sketches use GSHM / thresholded Laplace (never PMG). Configuration errors
are reported before Flink starts, naming the option. The source is unbounded unless
``--stop-offsets`` gives the end offset of every partition (never ``latest``: tansu answers it
wrongly); ``EndMarker`` messages close a partition's epochs in an unbounded run. Known connector bug
(FLINK-33466 / FLINK-31006, flink-connector-kafka 4.0.1): a *bounded* run resumed from a savepoint
reads to its stopping offsets and publishes everything but then does not finish; cancel it.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from privstream.connectors import validation
from privstream.operators.epochs import (
    DATA_DRIVEN_WATERMARK_ASSUMPTION,
    CountEpochs,
    EpochPolicy,
    TimeEpochs,
)
from privstream.operators.faults import TestFaults
from privstream.operators.release_logic import ReleaseConfig
from privstream.operators.sketch_spec import SketchSpec


class ConfigError(ValueError):
    """A bad option; the message starts with the option name."""


@contextmanager
def option_error(prefix: str = "") -> Iterator[None]:
    """Re-raise a ValueError of the block as a :class:`ConfigError` whose message is ``prefix`` + the
    ValueError's (a ConfigError passes unchanged)."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(f"{prefix}{exc}") from exc


def parse_duration_ms(text: str, option: str) -> int:
    """:func:`privstream.connectors.validation.parse_duration_ms`, raising :class:`ConfigError`."""
    with option_error():
        duration_ms = validation.parse_duration_ms(text, option)
    return duration_ms


def parse_epoch(text: str, lateness: str) -> EpochPolicy:
    """``--epoch N`` (N events per shard) or ``--epoch 60s`` (tumbling event time). ``--lateness`` is
    validated either way, though only time epochs use it."""
    lateness_ms = parse_duration_ms(lateness, "--lateness")
    text = text.strip()
    with option_error("--epoch: "):
        policy: EpochPolicy = (
            CountEpochs(int(text))
            if text.isdigit()
            else TimeEpochs(parse_duration_ms(text, "--epoch"), lateness_ms)
        )
    return policy


def check_kafka_options(args: argparse.Namespace) -> None:
    """``--bootstrap`` is ``host:port[,host:port...]`` (the Kafka clients' own parser), and it,
    ``--topic`` and ``--group-id`` may go verbatim into the Flink SQL source's options (the rule of
    :func:`privstream.connectors.validation.sql_option_value`, which the source applies)."""
    from privstream.connectors.clients import parse_bootstrap

    with option_error("--"):  # its message starts with "bootstrap:"
        parse_bootstrap(args.bootstrap)
    with option_error():
        for option, value in (
            ("--bootstrap", args.bootstrap),
            ("--topic", args.topic),
            ("--group-id", args.group_id),
        ):
            validation.sql_option_value(value, option)


def check_mechanism(spec: SketchSpec, release: ReleaseConfig) -> None:
    """Refuse a ``--mechanism`` that the release entry point would refuse for this job's merged
    sketches, listing the valid choices. The entry point's own checks answer for an empty merged
    sketch of the job's kind (same build, k and m), under the per-epoch budget; nothing is charged
    and no noise is drawn. (Count epochs calibrate to a smaller ε and δ by group privacy, which
    changes no mechanism's applicability: that depends on ε, δ > 0.)"""
    from privstream.accounting import Budget
    from privstream.mechanisms import applicable_mechanisms

    sketch = spec.merge([])
    reasons = applicable_mechanisms(sketch, Budget(release.epsilon, release.delta))
    valid = [name for name, reason in reasons.items() if not reason]
    if release.mechanism in valid or (release.mechanism == "auto" and valid):
        return
    what = f"this job's merged {spec.kind.upper()} sketches ({sketch.build.name})"
    if not valid:
        why = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
        raise ConfigError(
            f"--epsilon/--delta: no mechanism can release {what} with ε={release.epsilon:g}, "
            f"δ={release.delta:g} ({why})"
        )
    choices = f"choose one of: {', '.join(['auto', *valid])}"
    if release.mechanism not in reasons:
        raise ConfigError(f"--mechanism: unknown mechanism {release.mechanism!r}; {choices}")
    raise ConfigError(
        f"--mechanism: {release.mechanism} cannot release {what}: {reasons[release.mechanism]}; {choices}"
    )


def parse_stop_offsets(text: str | None) -> dict[int, int] | None:
    if not text:
        return None
    out: dict[int, int] = {}
    for part in text.split(","):
        match = re.match(r"^\s*(\d+)\s*[:=]\s*(\d+)\s*$", part)
        if not match:
            raise ConfigError(f"--stop-offsets: expected PARTITION:OFFSET[,...], got {part!r}")
        out[int(match.group(1))] = int(match.group(2))
    return out


@dataclass(frozen=True)
class JobConfig:
    bootstrap: str
    topic: str
    spec: SketchSpec
    policy: EpochPolicy
    release: ReleaseConfig
    releases_topic: str = "releases"
    ledger_topic: str = "ledger"
    dlq_topic: str = ""
    stop_offsets: dict[int, int] | None = None
    group_id: str = "privstream-heavy-hitters"
    parallelism: int = 1
    checkpoint_interval_ms: int = 2000
    bundle_size: int = 200
    checkpoint_dir: str = ""
    restore_from: str | None = None
    restart_attempts: int = 3
    sketch_topic: str | None = None  #: TESTS/AUDIT ONLY: merged pre-noise sketches (not private)
    faults: TestFaults = field(default_factory=TestFaults)  #: TESTS ONLY
    operator: str = "process"
    job_name: str = "privstream-heavy-hitters"
    flink_conf: tuple[tuple[str, str], ...] = ()


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of the heavy-hitters job (also used by ``privstream run heavy-hitters``)."""
    p = parser
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--topic", default="events", help="events topic (Avro EventBatch/Event or UserSetEvent)")
    p.add_argument("--epsilon", type=float, required=True, help="ε of each epoch's release")
    p.add_argument("--delta", type=float, required=True, help="δ of each epoch's release")
    p.add_argument("--k", type=int, required=True, help="counters per sketch")
    p.add_argument(
        "--epoch",
        required=True,
        help="N (N events per shard and epoch) or a duration (60s, 5m: tumbling event time)",
    )
    p.add_argument(
        "--lateness",
        default="0s",
        help="event-time epochs: allowed lateness behind the producers' EpochWatermark punctuation "
        "(process operator) or Flink's bounded out-of-orderness (window operator); default 0s",
    )
    p.add_argument(
        "--operator",
        choices=("process", "window"),
        default="process",
        help="sketch operator: keyed process function (default; count epochs, or time epochs closed by "
        "EpochWatermark punctuations) or tumbling event-time window aggregate (time epochs only; "
        "needs --trust-event-time)",
    )
    p.add_argument(
        "--trust-event-time",
        action="store_true",
        help="allow --operator window, whose epochs close on Flink's DATA-DRIVEN watermark (one far-future "
        "event can make other events late); releases then state this assumption",
    )
    p.add_argument(
        "--m", type=int, default=None, help="user-level: each UserSetEvent has <= m distinct items (PAMG)"
    )
    p.add_argument(
        "--shard-key",
        choices=("item", "user"),
        default=None,
        help="what producers hash to pick an event's partition (verified for every event; misrouted "
        "messages are dead-lettered): item (default for MG) or user (always for --m)",
    )
    p.add_argument(
        "--mechanism", default="auto", help="release mechanism (default: the entry point's choice)"
    )
    p.add_argument("--total-epsilon", type=float, default=None, help="ledger total ε (default: --epsilon)")
    p.add_argument("--total-delta", type=float, default=None, help="ledger total δ (default: --delta)")
    p.add_argument("--ledger-id", default=None, help="ledger id (default: heavy-hitters/<topic>)")
    p.add_argument("--releases-topic", default="releases")
    p.add_argument("--ledger-topic", default="ledger")
    p.add_argument("--dlq-topic", default=None, help="dead-letter topic (default: <topic>-dlq)")
    p.add_argument(
        "--stop-offsets", default=None, help="bounded run: PARTITION:END_OFFSET for every partition"
    )
    p.add_argument(
        "--stop-at-end-markers",
        action="store_true",
        help="bounded run: stop each partition after its EndMarker (found by a scan before the start)",
    )
    p.add_argument("--group-id", default="privstream-heavy-hitters")
    p.add_argument("--parallelism", type=int, default=1, help="parallelism of the sketch operator")
    p.add_argument("--checkpoint-interval", default="2s")
    p.add_argument(
        "--bundle-size",
        type=int,
        default=200,
        help="messages per Python bundle (python.fn-execution.bundle.size); each message is a batch",
    )
    p.add_argument(
        "--checkpoint-dir", default=None, help="checkpoint/savepoint directory (default: a temp dir)"
    )
    p.add_argument(
        "--flink-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Flink configuration (repeatable), e.g. taskmanager.numberOfTaskSlots=2",
    )
    p.add_argument("--restore-from", default=None, help="savepoint or retained checkpoint to resume from")
    p.add_argument("--restart-attempts", type=int, default=3, help="fixed-delay restart strategy attempts")
    p.add_argument(
        "--noise-seed",
        type=int,
        default=None,
        help="TESTS ONLY: deterministic release noise (never use in production)",
    )
    p.add_argument(
        "--expose-sketches-topic",
        default=None,
        help="TESTS/AUDIT ONLY: also write the merged PRE-NOISE sketches to this topic (NOT private)",
    )
    p.add_argument(
        "--test-fail-once", default=None, metavar="MARKER", help="TESTS ONLY: fail once (marker file)"
    )
    p.add_argument("--test-fail-after", type=int, default=0, help="TESTS ONLY: ... after N events of shard 0")


def config_from_args(args: argparse.Namespace) -> JobConfig:
    """Validate everything that can be checked without Kafka; raises :class:`ConfigError`."""

    def positive(name: str, value: int) -> None:
        if value < 1:
            raise ConfigError(f"--{name}: must be >= 1, got {value}")

    positive("k", args.k)
    positive("parallelism", args.parallelism)
    positive("bundle-size", args.bundle_size)
    if args.restart_attempts < 0:
        raise ConfigError(f"--restart-attempts: must be >= 0, got {args.restart_attempts}")
    if args.noise_seed is not None:
        print(
            "privstream: WARNING --noise-seed is for TESTS ONLY: release noise is deterministic",
            file=sys.stderr,
        )
    if args.expose_sketches_topic:
        print(
            "privstream: WARNING --expose-sketches-topic publishes NON-PRIVATE sketches (tests/audit only)",
            file=sys.stderr,
        )
    check_kafka_options(args)
    if args.m is not None and args.shard_key == "item":
        raise ConfigError("--shard-key: a user-level job (--m) shards by user: one user's sets in one shard")
    with option_error("--"):  # SketchSpec's messages start with the parameter: k or m
        spec = SketchSpec("pamg" if args.m is not None else "mg", args.k, args.m, args.shard_key)
    policy = parse_epoch(args.epoch, args.lateness)
    if args.operator == "window":
        if not isinstance(policy, TimeEpochs):
            raise ConfigError("--operator: the window variant needs event-time epochs (e.g. --epoch 60s)")
        if not args.trust_event_time:
            raise ConfigError(
                "--operator: the window variant closes epochs on Flink's data-driven watermark (max event "
                "time seen - --lateness), so ONE event with a far-future time can make other events late "
                "and the add/remove-one-event (ε, δ) guarantee fails; use the default --operator process "
                "(epochs closed by producer punctuation), or pass --trust-event-time to accept the assumption"
            )
        policy = TimeEpochs(
            policy.length_ms, policy.lateness_ms, neighbour_assumption=DATA_DRIVEN_WATERMARK_ASSUMPTION
        )
    elif args.trust_event_time:
        raise ConfigError("--trust-event-time: only applies to --operator window")
    try:
        release = ReleaseConfig(
            epsilon=args.epsilon,
            delta=args.delta,
            total_epsilon=args.epsilon if args.total_epsilon is None else args.total_epsilon,
            total_delta=args.delta if args.total_delta is None else args.total_delta,
            ledger_id=args.ledger_id or f"heavy-hitters/{args.topic}",
            mechanism=args.mechanism,
            noise_seed=args.noise_seed,
        )
    except (ValueError, TypeError) as exc:
        name = str(exc).split(":")[0].split()[0].replace("_", "-")
        raise ConfigError(f"--{name}: {exc}") from exc
    check_mechanism(spec, release)
    interval = parse_duration_ms(args.checkpoint_interval, "--checkpoint-interval")
    extra_conf = []
    for item in args.flink_conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--flink-conf: expected KEY=VALUE, got {item!r}")
        extra_conf.append((key.strip(), value.strip()))
    return JobConfig(
        bootstrap=args.bootstrap,
        topic=args.topic,
        spec=spec,
        policy=policy,
        release=release,
        releases_topic=args.releases_topic,
        ledger_topic=args.ledger_topic,
        dlq_topic=args.dlq_topic or f"{args.topic}-dlq",
        stop_offsets=parse_stop_offsets(args.stop_offsets),
        group_id=args.group_id,
        parallelism=args.parallelism,
        checkpoint_interval_ms=interval,
        bundle_size=args.bundle_size,
        checkpoint_dir=args.checkpoint_dir or tempfile.mkdtemp(prefix="privstream-ckpt-"),
        restore_from=args.restore_from,
        restart_attempts=args.restart_attempts,
        sketch_topic=args.expose_sketches_topic,
        faults=TestFaults(args.test_fail_once, args.test_fail_after),
        flink_conf=tuple(extra_conf),
        operator=args.operator,
    )


def check_kafka(config: JobConfig) -> int:
    """Checks against the broker before Flink starts; returns the number of shards (partitions)."""
    from privstream.connectors.clients import ensure_reachable, kafka_consumer
    from privstream.connectors.topics import TopicSpec, create_topics

    ensure_reachable(config.bootstrap)
    consumer = kafka_consumer(config.bootstrap)
    try:
        partitions = consumer.partitions_for_topic(config.topic)
    finally:
        consumer.close()
    if not partitions:
        raise ConfigError(f"--topic: topic {config.topic!r} does not exist on {config.bootstrap}")
    if sorted(partitions) != list(range(len(partitions))):
        raise ConfigError(f"--topic: unexpected partition ids {sorted(partitions)}")
    if config.stop_offsets is not None and set(config.stop_offsets) != set(partitions):
        raise ConfigError(
            f"--stop-offsets: must give every partition of {config.topic!r} ({sorted(partitions)}), "
            f"got {sorted(config.stop_offsets)}"
        )
    specs = [
        TopicSpec(config.releases_topic),
        TopicSpec(config.ledger_topic, compacted=True),
        TopicSpec(config.dlq_topic),
    ]
    if config.sketch_topic:
        specs.append(TopicSpec(config.sketch_topic))
    create_topics(config.bootstrap, specs)
    return len(partitions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m privstream.jobs.heavy_hitters", description=__doc__.splitlines()[0]
    )
    configure(parser)
    return run(parser.parse_args(argv))


def resolve(args: argparse.Namespace) -> tuple[JobConfig, int, list[str]]:
    """Everything checked before Flink starts: options, connector jars, topics, end markers.

    Returns ``(config, shards, jar URLs)``; raises :class:`ConfigError`,
    :class:`~privstream.connectors.flink_jars.ConnectorJarsError` or ``ConnectionError``."""
    from privstream.connectors.flink_jars import connector_jar_urls
    from privstream.jobs.stream_end import end_marker_offsets

    config = config_from_args(args)
    if args.stop_at_end_markers and config.stop_offsets is not None:
        raise ConfigError("--stop-at-end-markers: give either it or --stop-offsets, not both")
    jars = connector_jar_urls()
    shards = check_kafka(config)
    if args.stop_at_end_markers:
        try:
            config = dataclasses.replace(
                config, stop_offsets=end_marker_offsets(config.bootstrap, config.topic)
            )
        except TimeoutError as exc:
            raise ConfigError(f"--stop-at-end-markers: {exc}") from exc
    return config, shards, jars


def run(args: argparse.Namespace) -> int:
    """Validate, check Kafka and the connector jars, then run the job to completion."""
    from privstream.connectors.flink_jars import ConnectorJarsError
    from privstream.jobs.pipeline import execute

    try:
        config, shards, jars = resolve(args)
    except (ConfigError, ConnectorJarsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(f"error: --bootstrap: {exc}", file=sys.stderr)
        return 2
    result = execute(config, shards=shards, jars=jars)
    print(f"privstream: job finished: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
