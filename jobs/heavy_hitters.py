"""The central heavy-hitters job: MG (or PAMG) per shard → fixed-order merge → one noisy release per epoch.

::

    python -m privstream.jobs.heavy_hitters --bootstrap 127.0.0.1:9092 --topic events \\
        --epsilon 1 --delta 1e-6 --k 4096 --epoch 100000          # 100000 events per shard and epoch
    privstream run heavy-hitters ... --epoch 60s --lateness 5s   # tumbling event-time epochs, closed
                                                                 # by EpochWatermark punctuation
    privstream run heavy-hitters ... --m 8                       # user sets (UserSetEvent) with PAMG

Pipeline (PyFlink DataStream; see ``docs/stack-facts.md``)::

    KafkaSource(events, raw bytes + partition + offset)          offsets in checkpoints
      → key_by(partition) → ShardSketchFunction                  keyed state = epoch sketches
            └─ side output: dead letters → <topic>-dlq           (undecodable, late, rejected)
      → key_by(0) → EpochCombineFunction                         shard sketches in shard-id order
                                                                 (per shard) or their fixed-order merge
      → key_by(0) → ReleaseFunction                               ledger in state, release entry point
            ├─ main: Avro Release (ReleaseRefused once the budget is exhausted) → releases
            │                                                     KafkaSink EXACTLY_ONCE
            └─ side: LedgerEntry (one per charge, hash-chained) keyed by ledger id → ledger
                                                                  KafkaSink EXACTLY_ONCE (compacted)

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

This module is the command line (also the file ``flink run -py`` submits): it parses the options
into a :class:`~privstream.jobs.config.HeavyHittersConfig` and runs a
:class:`~privstream.jobs.job.HeavyHittersJob`, the programmatic API, which it re-exports.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from privstream.connectors import validation
from privstream.connectors.clients import add_bootstrap_option
from privstream.jobs.config import (
    RELEASE_MODES,
    SHARD_KEYS,
    ConfigError,
    HeavyHittersConfig,
    TestHooks,
    mechanism_choices,
)
from privstream.jobs.job import HeavyHittersJob
from privstream.jobs.run_report import add_progress_option

if TYPE_CHECKING:
    from privstream.jobs.run_report import RunPlan

__all__ = [
    "ConfigError",
    "HeavyHittersConfig",
    "HeavyHittersJob",
    "config_from_args",
    "configure",
    "main",
    "run",
]


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of the heavy-hitters job (also used by ``privstream run heavy-hitters``)."""
    p = parser
    add_bootstrap_option(p)
    p.add_argument(
        "--topic",
        default="events",
        help="events topic (Avro EventBatch/Event or UserSetEvent; default: %(default)s)",
    )
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
        "(epochs close on punctuation only, never on event times); default 0s",
    )
    p.add_argument(
        "--m", type=int, default=None, help="user-level: each UserSetEvent has <= m distinct items (PAMG)"
    )
    p.add_argument(
        "--shard-key",
        choices=SHARD_KEYS,
        default=None,
        help="what producers hash to pick an event's partition (verified for every event; misrouted "
        "messages are dead-lettered): item (default for MG) or user (always for --m)",
    )
    p.add_argument(
        "--release-mode",
        choices=RELEASE_MODES,
        default=None,
        help="per-shard (default for MG): each shard's Alg. 1 sketch released with PMG, whose threshold "
        "does not grow with k, and the releases summed (parallel composition over the hash partition); "
        "merged (default for --m): the shards' fixed-order merge released with GSHM / thresholded Laplace",
    )
    p.add_argument(
        "--mechanism",
        choices=mechanism_choices(),
        default="auto",
        help="release mechanism: auto (default: the valid one with the smallest error bound) or one "
        "valid for the job's sketches in its release mode (the others are refused with the reason and "
        "the valid choices)",
    )
    p.add_argument("--total-epsilon", type=float, default=None, help="ledger total ε (default: --epsilon)")
    p.add_argument("--total-delta", type=float, default=None, help="ledger total δ (default: --delta)")
    p.add_argument("--ledger-id", default=None, help="ledger id (default: heavy-hitters/<topic>)")
    p.add_argument(
        "--releases-topic",
        default="releases",
        help="where releases go (Release, ReleaseRefused; default: %(default)s)",
    )
    p.add_argument(
        "--ledger-topic", default="ledger", help="the privacy ledger's topic (default: %(default)s)"
    )
    p.add_argument(
        "--ledger-timeout",
        default="60s",
        help="how long the start-up may take to read the ledger topic to its end; the job refuses to "
        "start if it cannot (default 60s)",
    )
    p.add_argument(
        "--ledger-lease",
        default="60s",
        help="a running job writes a heartbeat to the ledger topic every third of this; a start-up that "
        "finds another writer of the same ledger id alive less than this ago waits up to this long for "
        "its next heartbeat and refuses to start if it comes (a second live job). A restart right after "
        "a stop waits up to this once (default 60s)",
    )
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
    add_progress_option(p)


def _duration(text: str, option: str) -> timedelta:
    try:
        return timedelta(milliseconds=validation.parse_duration_ms(text, option))
    except ValueError as exc:  # its message starts with the option it is given
        raise ConfigError(str(exc)) from None


def _epoch(text: str) -> int | timedelta:
    """``--epoch N`` (events per shard) or ``--epoch 60s`` (tumbling event time)."""
    text = text.strip()
    return int(text) if text.isdigit() else _duration(text, "--epoch")


def _stop_offsets(text: str | None) -> dict[int, int] | None:
    if not text:
        return None
    out: dict[int, int] = {}
    for part in text.split(","):
        match = re.match(r"^\s*(\d+)\s*[:=]\s*(\d+)\s*$", part)
        if not match:
            raise ConfigError(f"--stop-offsets: expected PARTITION:OFFSET[,...], got {part!r}")
        out[int(match.group(1))] = int(match.group(2))
    return out


def _flink_conf(items: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--flink-conf: expected KEY=VALUE, got {item!r}")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def config_from_args(args: argparse.Namespace) -> HeavyHittersConfig:
    """The job's config from parsed options; raises :class:`ConfigError` naming the option."""
    return HeavyHittersConfig(
        epsilon=args.epsilon,
        delta=args.delta,
        k=args.k,
        epoch=_epoch(args.epoch),
        bootstrap=args.bootstrap,
        topic=args.topic,
        lateness=_duration(args.lateness, "--lateness"),
        m=args.m,
        shard_key=args.shard_key,
        release_mode=args.release_mode,
        mechanism=args.mechanism,
        total_epsilon=args.total_epsilon,
        total_delta=args.total_delta,
        ledger_id=args.ledger_id,
        releases_topic=args.releases_topic,
        ledger_topic=args.ledger_topic,
        ledger_timeout=_duration(args.ledger_timeout, "--ledger-timeout"),
        ledger_lease=_duration(args.ledger_lease, "--ledger-lease"),
        dlq_topic=args.dlq_topic,
        stop_offsets=_stop_offsets(args.stop_offsets),
        stop_at_end_markers=args.stop_at_end_markers,
        group_id=args.group_id,
        parallelism=args.parallelism,
        checkpoint_interval=_duration(args.checkpoint_interval, "--checkpoint-interval"),
        bundle_size=args.bundle_size,
        checkpoint_dir=args.checkpoint_dir,
        flink_conf=_flink_conf(args.flink_conf),
        restore_from=args.restore_from,
        restart_attempts=args.restart_attempts,
    )


def run(args: argparse.Namespace, *, hooks: TestHooks | None = None) -> int:
    """Validate, check the connector jars and Kafka, then run the job to completion. ``hooks``:
    TESTS ONLY, programmatic (a test's entry script passes them; no option does)."""
    from privstream.connectors.flink_jars import ConnectorJarsError
    from privstream.connectors.ledger_topic import LedgerUnavailable
    from privstream.jobs import run_report
    from privstream.jobs.preflight import warn_before_start

    from privstream.console import console_logging

    console_logging()
    try:
        config = config_from_args(args)
        warn_before_start(config)  # noise-dominated parameters: a warning, from public parameters only
        ui_conf, web_ui = run_report.web_ui_settings(config.flink_conf)
        job = HeavyHittersJob(replace(config, flink_conf=config.flink_conf + ui_conf), hooks=hooks)
        env = job.prepare()
        interval_s = run_report.progress_interval_s(args)
    except (ConfigError, ConnectorJarsError, LedgerUnavailable, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        print(f"error: --bootstrap: {exc}", file=sys.stderr)
        return 2
    return run_report.execute_reported(env, run_plan(job, web_ui), interval_s=interval_s)


def run_plan(job: HeavyHittersJob, web_ui: str | None) -> RunPlan:
    """What the start banner, progress and summary say about ``job``'s submission."""
    from privstream.jobs.run_report import RunPlan

    config, release = job.config, job.config.release
    epoch = f"{config.epoch} events per shard" if isinstance(config.epoch, int) else f"{config.epoch}"
    return RunPlan.of(
        "heavy-hitters",
        config,
        web_ui,
        run_id=job.run_id,
        dlq_topic=config.dlq,
        ledger_topic=config.ledger_topic,
        ledger_id=release.ledger_id,
        per_release=f"(ε={release.epsilon:g}, δ={release.delta:g}) per epoch ({epoch})",
        total=f"(ε={release.total_epsilon:g}, δ={release.total_delta:g})",
    )


def main(argv: list[str] | None = None, *, hooks: TestHooks | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m privstream.jobs.heavy_hitters", description=__doc__.splitlines()[0]
    )
    configure(parser)
    return run(parser.parse_args(argv), hooks=hooks)


if __name__ == "__main__":
    sys.exit(main())
