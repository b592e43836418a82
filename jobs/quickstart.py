"""``privstream quickstart``: the whole pipeline on embedded defaults, in one command.

1. starts the embedded Kafka-protocol broker (tansu) on loopback;
2. produces a synthetic Zipf stream as ``EventBatch`` messages, then an ``EndMarker`` per partition;
3. runs the heavy-hitters Flink job locally (MG per partition → fixed-order merge → one private
   release, GSHM / thresholded Laplace with exact noise from the CSPRNG, exactly-once Kafka sinks);
4. reads the committed release and prints the released heavy hitters beside the true counts;
5. ends with how to see a job's output yourself: ``privstream tail`` and ``privstream dashboard``
   against a broker that keeps running (``privstream broker``): :func:`next_steps`.

Needs ``privstream setup`` once (Flink's Kafka connector jars). Takes well under two minutes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from privstream.jobs.config import HeavyHittersConfig


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=200_000, help="synthetic events (default 200000)")
    parser.add_argument("--partitions", type=int, default=2, help="topic partitions = shards (default 2)")
    parser.add_argument("--k", type=int, default=1024, help="MG counters per partition (default 1024)")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--zipf-s", type=float, default=1.1, help="Zipf exponent of the synthetic items")
    parser.add_argument(
        "--seed", type=int, default=1, help="seed of the synthetic DATA (noise is always CSPRNG)"
    )
    parser.add_argument("--top", type=int, default=15, help="rows to print")


def _produce(bootstrap: str, args: argparse.Namespace) -> tuple[object, float]:
    import numpy as np
    from privstream.connectors.produce import EventProducer
    from privstream.connectors.topics import TopicSpec, create_topics

    from privstream.datagen import generate_events

    create_topics(bootstrap, [TopicSpec("events", args.partitions)])
    columns = generate_events(
        "zipf",
        args.events,
        seed=args.seed,
        universe=10_000,
        s=args.zipf_s,
        rate=50_000.0,
        start_time_ms=int(time.time() * 1000),
    )
    start = time.monotonic()
    with EventProducer(bootstrap, "events", events_per_message=1000, key_by="item") as producer:
        producer.send_columns(columns)
        producer.finish()
    return np.asarray(columns.items), time.monotonic() - start


def _job_config(args: argparse.Namespace, checkpoint_dir: str) -> HeavyHittersConfig:
    """The heavy-hitters job for this quickstart: one count epoch holding the whole stream, bounded
    by the EndMarkers (``bootstrap`` is replaced once the broker runs). Raises ConfigError."""
    from privstream.jobs.config import HeavyHittersConfig

    return HeavyHittersConfig(
        epsilon=args.epsilon,
        delta=args.delta,
        k=args.k,
        epoch=args.events,
        topic="events",
        stop_at_end_markers=True,
        checkpoint_dir=checkpoint_dir,
    )


def _error(message: object) -> int:
    print(f"privstream quickstart: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Check every option and the connector jars, then broker → stream → job → printed release."""
    import numpy as np
    from privstream.connectors.broker import EmbeddedBroker
    from privstream.connectors.consume import read_topic
    from privstream.connectors.flink_jars import ConnectorJarsError, find_connector_jars
    from privstream.jobs.job import HeavyHittersJob
    from privstream.operators.release_logic import noise_error

    from privstream.sketches import item_order_key

    for option, value in (("--events", args.events), ("--partitions", args.partitions)):
        if value < 1:
            return _error(f"{option}: must be >= 1, got {value}")
    with tempfile.TemporaryDirectory(prefix="privstream-quickstart-") as tmp:
        try:  # fail fast: the job's configuration and the jars, before the broker starts
            config = _job_config(args, f"{tmp}/checkpoints")
            if find_connector_jars() is None:
                raise ConnectorJarsError(
                    "Flink's Kafka connector jars are missing: run `privstream setup` first"
                )
        except (ValueError, ConnectorJarsError) as exc:  # ConfigError is a ValueError
            return _error(exc)
        with EmbeddedBroker() as broker:
            print(f"[1/4] embedded Kafka-protocol broker (tansu) at {broker.bootstrap}")
            items, seconds = _produce(broker.bootstrap, args)
            print(
                f"[2/4] produced {len(items):,} Zipf({args.zipf_s}) events as 1000-event batches "
                f"on {args.partitions} partitions in {seconds:.1f} s"
            )
            print(
                f"[3/4] running the heavy-hitters Flink job (MG k={args.k} per partition → "
                f"{'PMG per partition, releases summed' if config.spec.per_shard else 'merge → release'}) ..."
            )
            start = time.monotonic()
            job = HeavyHittersJob(replace(config, bootstrap=broker.bootstrap))
            job.run()
            print(f"      job finished in {time.monotonic() - start:.1f} s (run {job.run_id})")
            published = read_topic(broker.bootstrap, config.releases_topic, idle_s=2.0)
            releases = [r.value for r in published if r.schema == "Release"]  # not ReleaseRefused
    if not releases:
        print("privstream quickstart: error: the job published no release", file=sys.stderr)
        return 1
    values, counts = np.unique(items, return_counts=True)
    true = dict(zip(values.tolist(), counts.tolist(), strict=True))
    rel = releases[-1]
    print(
        f"[4/4] release of epoch {rel['epoch']}: ε={rel['epsilon']:g}, δ={rel['delta']:g}, "
        f"mechanism={rel['mechanism']}, neighbours: {rel['neighbour_relation']}, "
        f"privacy unit: {rel['privacy_unit']}, error bound ±{noise_error(rel['error_bound']):.0f}"
    )
    released = {r["item"]: r["count"] for r in rel["items"]}
    top_true = sorted(true, key=lambda x: -true[x])[: args.top]
    rows = sorted(set(top_true) | set(released), key=lambda x: (-true.get(x, 0), item_order_key(x)))[
        : args.top
    ]
    print(f"\n  {'item':>8}  {'true count':>10}  {'released':>10}")
    for x in rows:
        shown = f"{released[x]:>10,}" if x in released else f"{'—':>10}"
        print(f"  {x!s:>8}  {true.get(x, 0):>10,}  {shown}")
    print(
        f"\n  {len(released)} items released (sorted by the item order in the message); "
        "'—' = below the mechanism's threshold."
    )
    which = "its partition's MG estimate" if config.spec.per_shard else "merged MG estimate"
    print(
        f"  released = {which} (never above the true count, at most n/(k+1) = "
        f"{len(items) // (args.k + 1):,} below it) + exact noise (stated bound ±{noise_error(rel['error_bound']):.0f}, at the mechanism's confidence)."
    )
    print()
    print("\n".join(next_steps(config.releases_topic)))
    return 0


def next_steps(releases_topic: str) -> list[str]:
    """How to see a job's output once the quickstart's own broker is gone (it stops with the
    command): the lines the quickstart ends with."""
    return [
        "next: see a job's output yourself (the quickstart's broker stopped with it):",
        "  privstream broker --port 9092 &              # a broker that keeps running",
        "  privstream produce --generator zipf --count 200000 --batch 1000",
        "  privstream run heavy-hitters --epsilon 1 --delta 1e-6 --k 1024 --epoch 100000 --stop-at-end-markers",
        f"  privstream tail {releases_topic}                       # the releases, decoded "
        "(--run RUN_ID: one run's)",
        "  privstream dashboard                          # the latest releases live in your browser",
    ]
