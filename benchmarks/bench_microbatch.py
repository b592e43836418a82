"""Micro-batching options for getting events into the Python sketch operator, measured in one run.

Every option reads the same Zipf events (``bench_flink.zipf_columns``: Zipf(1.1) on 100,000 items,
event times at 100,000 events/s) from a topic of the embedded tansu broker with ``--partitions``
partitions (produced once, untimed, with ``bench_kafka.confluent_produce``), runs with the job's Flink
settings (checkpointing every 2 s in ``EXACTLY_ONCE`` mode, fixed-delay restarts) and keeps one
Misra–Gries sketch (k = 256) per partition in keyed state:

- ``batches-process-job`` (a): producers send Avro ``EventBatch`` messages of ``--batch`` events; the
  privstream heavy-hitters job itself (``bench_flink.run_privstream``: KafkaSource → keyed
  ``ShardSketchFunction`` → ``MisraGries.update_batch`` on numpy arrays → fixed-order merge → GSHM
  release → transactional KafkaSinks) in PyFlink's default *process* mode; all ``--events`` events.
- ``batches-thread-job`` (b): the same job and topic in *thread* mode, set through the job's existing
  ``flink_conf`` setting (``--flink-conf KEY=VALUE``: ``python.execution-mode=thread`` plus ``python.pythonpath``, see
  :func:`thread_mode_pythonpath`); no job code was changed. On PyFlink 2.3 it fails at the first
  message: the embedded converter crashes on an empty ``BYTES`` ``ValueState`` (``tuple(None)`` in
  ``pyflink/fn_execution/embedded/converters.py``), the bug ``docs/stack-facts.md`` records. The
  row shows that failure and its cause.
- ``batches-process-sketchop`` / ``batches-thread-sketchop``: to compare the two modes anyway, the same
  batch topic into a minimal keyed operator (decode the ``EventBatch``, ``update_batch``; the sketch
  object in a pickled ``ValueState``, which thread mode can hold), in process and in thread mode.
- ``table-tumble-array-agg`` (c): Java-side batching. The same events as single-event messages (one
  ``item,event_time`` CSV event per message, so Flink's Java CSV format decodes them: our Avro
  single-object framing would need a Python or Java UDF) on their own topic; a Table API ``kafka``
  table with an event-time attribute, ``TUMBLE`` windows of ``--window-ms`` (default: about
  ``--batch`` events per partition and window) grouped by partition with ``ARRAY_AGG(item)`` in SQL,
  then ``to_data_stream`` into the minimal keyed operator, which feeds each array to
  ``MisraGries.update_batch``; the first ``--table-events`` events (default: all).
- ``per-record-python`` (d): single-event Avro ``Event`` messages on their own topic; the minimal
  keyed operator decodes each message and updates the sketch one item at a time
  (``MisraGries.update``). Per-record Python is slow, so only the first ``--per-record-events``.

The minimal operator sends one line per partition (events counted) to the client at the end of
input; the script checks it against the number of events produced.

Rates are events / wall time from the submission of the job to its end, JVM start included: each
option runs in a fresh Python process (``--child``); the clock starts before PyFlink's gateway (the
JVM) is launched and stops when ``execute`` (or the collect iterator) returns, so every rate
includes ~10 s of JVM, Python worker and job start. The job options (a, b) also include the job's
ledger read before it starts (~1.5 s). Producing the topics is not timed. Options run one after the
other: never two Flink jobs at once.

Why producer batches in process mode were chosen (``README.md``, "Micro-batches"): exactly once
stays simple. Batch boundaries are in the Kafka log, so a restore from a checkpoint replays
identical batches from the checkpointed offsets and the restored sketches are byte-identical to
those of an uninterrupted run. Thread mode has keyed-state bugs on this PyFlink (``docs/stack-facts.md``:
count windows fail with checkpointing, empty byte-array state crashes; the job's own operator fails
as above). Table API windows regroup events by event time (and may reorder them), so the arrays the
sketch sees are not a function of Kafka offsets and do not replay identically after a restore; and
they are no faster: into the same minimal operator, producer batches measured a little faster, and
per-record Python is 20x slower than either (first run, 4M events: 152k vs 139k vs 7.5k events/s,
each with ~10 s of start-up; the job itself, with merge, release and transactional sinks, 122k).

Run (the machine is shared; never two heavy jobs at once)::

    flock /tmp/privstream-heavy.lock .venv/bin/python benchmarks/bench_microbatch.py

``--options`` picks a subset; ``--events``, ``--table-events``, ``--per-record-events``, ``--batch``,
``--partitions`` and ``--window-ms`` change sizes (defaults: about 3.5 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_flink import ensure_jar_urls, job_config, run_privstream, zipf_columns
from bench_kafka import confluent_produce
from privstream.connectors.broker import EmbeddedBroker
from privstream.connectors.topics import TopicSpec, create_topics
from privstream.jobs.job import HeavyHittersJob

from privstream.datagen import EventColumns

K = 256
RATE = 100_000  # events/s of the generated event times (bench_flink.zipf_columns)
#: option -> (topic kind, what runs it): see the module docstring.
OPTIONS = {
    "batches-process-job": ("batches", "job"),
    "batches-thread-job": ("batches", "job"),
    "batches-process-sketchop": ("batches", "sketchop"),
    "batches-thread-sketchop": ("batches", "sketchop"),
    "table-tumble-array-agg": ("csv", "table"),
    "per-record-python": ("single", "per-record"),
}


# --- the options, each run in its own process -------------------------------------------------


def thread_mode_pythonpath(root: Path) -> str:
    """``python.pythonpath`` for thread mode. Its Python runs inside the JVM (pemja) without this
    venv's site processing, so neither the venv's site-packages nor the editable install's package
    mapping (``privstream.operators`` → ``operators/``, …) is on its path: give it site-packages and
    a ``privstream/`` of symlinks laid out as installed."""
    import sysconfig

    import privstream.connectors
    import privstream.jobs
    import privstream.operators

    import privstream

    package = root / "privstream"
    package.mkdir(parents=True)
    for entry in Path(privstream.__path__[0]).iterdir():
        (package / entry.name).symlink_to(entry)
    for sub in (privstream.connectors, privstream.jobs, privstream.operators):
        (package / sub.__name__.rsplit(".", 1)[1]).symlink_to(sub.__path__[0])
    return f"{root}:{sysconfig.get_paths()['purelib']}"


def _mode_conf(option: str, spec: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Flink settings of the execution mode (the job's existing ``flink_conf`` overrides)."""
    if "-thread-" not in option:
        return ()
    pythonpath = thread_mode_pythonpath(Path(spec["ckpt"] + "-pythonpath"))
    return (("python.execution-mode", "thread"), ("python.pythonpath", pythonpath))


def run_job(option: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The privstream heavy-hitters job (``bench_flink.run_privstream``) over the batch topic."""
    config = job_config(
        spec["bootstrap"],
        spec["topic"],
        k=K,
        epoch=spec["events"],
        stop_offsets=spec["stops"],
        checkpoint_dir=spec["ckpt"],
        group_id=option,
        ledger_id=option,
        releases_topic=f"{option}-releases",
        ledger_topic=f"{option}-ledger",
        dlq_topic=f"{option}-dlq",
        flink_conf=_mode_conf(option, spec),
    )
    return {"events": spec["events"], "seconds": run_privstream(config)}


def feed_array(sketch: Any, row: Any) -> None:
    """A ``(partition, ARRAY_AGG(item))`` row from the Table API."""
    sketch.update_batch(np.asarray(row[1], dtype=np.int64))


def feed_batch_message(sketch: Any, row: Any) -> None:
    """An ``EventBatch`` source row ``(payload, partition, offset)``; end markers are skipped."""
    from privstream.operators.payloads import EventPayload, decode_payload

    payload = decode_payload(row[0], user_sets=False)
    if isinstance(payload, EventPayload):
        sketch.update_batch(payload.items)


def feed_event_message(sketch: Any, row: Any) -> None:
    """A single-event ``Event`` source row: one item at a time (Alg. 1 ``update``)."""
    from privstream.connectors.avro_codec import decode

    name, record = decode(row[0])
    if name == "Event":
        sketch.update(record["item"])


def _shard_sketch_function(k: int, feed: Any) -> Any:
    """Keyed by partition: a ``MisraGries(k)`` object in a keyed ``ValueState``, fed each record with
    ``feed``; emits ``"partition events records"`` at the end of input."""
    from privstream.operators.shard_operator import END_OF_INPUT
    from pyflink.common import Types
    from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import ValueStateDescriptor

    from privstream.sketches import MisraGries

    class ShardSketch(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            self.sketch = ctx.get_state(ValueStateDescriptor("sketch", Types.PICKLED_BYTE_ARRAY()))
            self.records = ctx.get_state(ValueStateDescriptor("records", Types.LONG()))

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context):
            sketch = self.sketch.value()
            if sketch is None:
                sketch = MisraGries(k)
                ctx.timer_service().register_event_time_timer(END_OF_INPUT)
            feed(sketch, value)
            self.sketch.update(sketch)
            self.records.update((self.records.value() or 0) + 1)

        def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
            yield f"{ctx.get_current_key()} {self.sketch.value().n} {self.records.value()}"

    return ShardSketch()


def _environment(option: str, spec: dict[str, Any], bundle_size: int) -> Any:
    """A Flink environment with the job's settings (checkpointing, restart strategy, jars)."""
    config = job_config(
        spec["bootstrap"],
        spec["topic"],
        k=K,
        epoch=1,
        checkpoint_dir=spec["ckpt"],
        bundle_size=bundle_size,
        flink_conf=_mode_conf(option, spec),
    )
    return HeavyHittersJob(config).environment(ensure_jar_urls())


def run_collecting(option: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Source → key_by(partition) → :func:`_shard_sketch_function` → collected to this client."""
    from privstream.operators.kafka_io import events_source
    from pyflink.common import Types
    from pyflink.table import StreamTableEnvironment

    kind = OPTIONS[option][1]
    start = time.monotonic()
    # per record, large bundles are fastest (docs/stack-facts.md); a record is an array otherwise
    env = _environment(option, spec, bundle_size=10_000 if kind == "per-record" else 200)
    t_env = StreamTableEnvironment.create(env)
    if kind == "table":
        rows, feed = _table_arrays(t_env, spec), feed_array
    else:
        rows = events_source(
            t_env,
            bootstrap=spec["bootstrap"],
            topic=spec["topic"],
            group_id=option,
            stop_offsets=spec["stops"],
        )
        feed = feed_event_message if kind == "per-record" else feed_batch_message
    counted = rows.key_by(lambda row: row[1 if kind != "table" else 0], key_type=Types.INT()).process(
        _shard_sketch_function(K, feed), output_type=Types.STRING()
    )
    with counted.execute_and_collect(option) as results:
        lines = [str(line).split() for line in results]
    return {
        "events": spec["events"],
        "seconds": time.monotonic() - start,
        "counted": sum(int(line[1]) for line in lines),
        "records_into_python": sum(int(line[2]) for line in lines),
    }


def _table_arrays(t_env: Any, spec: dict[str, Any]) -> Any:
    """Java-side batching: CSV single events → event-time TUMBLE → ``(partition, ARRAY_AGG(item))``."""
    bounded = ";".join(f"partition:{p},offset:{o}" for p, o in sorted(spec["stops"].items()))
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE single_events (item BIGINT, event_time BIGINT, "
        "part INT METADATA FROM 'partition' VIRTUAL, ts AS TO_TIMESTAMP_LTZ(event_time, 3), "
        "WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ("
        f"'connector' = 'kafka', 'topic' = '{spec['topic']}', "
        f"'properties.bootstrap.servers' = '{spec['bootstrap']}', 'properties.group.id' = 'mb-table', "
        "'properties.isolation.level' = 'read_committed', 'scan.startup.mode' = 'earliest-offset', "
        f"'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = '{bounded}', "
        "'format' = 'csv')"
    )
    arrays = t_env.sql_query(
        "SELECT part, ARRAY_AGG(item) AS items FROM TABLE(TUMBLE(TABLE single_events, DESCRIPTOR(ts), "
        f"INTERVAL '{spec['window_ms'] / 1000:.3f}' SECOND)) GROUP BY part, window_start, window_end"
    )
    return t_env.to_data_stream(arrays)


def _root_cause(exc: BaseException) -> str:
    """The innermost ``Caused by`` of a Java failure and the Python frame it names, if any."""
    lines = [line.strip() for line in str(exc).splitlines()]
    causes = [i for i, line in enumerate(lines) if line.startswith("Caused by:")]
    if not causes:
        return f"{type(exc).__name__}: {exc}"
    i = causes[-1]
    return " | ".join(lines[i : i + 2])


def child(option: str, spec: dict[str, Any], result_file: str) -> None:
    spec["stops"] = {int(p): o for p, o in spec["stops"].items()}
    try:
        result = run_job(option, spec) if OPTIONS[option][1] == "job" else run_collecting(option, spec)
    except Exception as exc:  # reported in the table, with the cause
        result = {"error": _root_cause(exc)}
    Path(result_file).write_text(json.dumps(result))


# --- the parent: produce once, run every option in a fresh process ------------------------------


def produce_topics(bootstrap: str, opts: argparse.Namespace) -> dict[str, tuple[str, int, dict[int, int]]]:
    """The three topics over the same events: ``{kind: (topic, events, stop offsets)}``."""
    columns = zipf_columns(opts.events, seed=1)

    def prefix(n: int) -> EventColumns:
        return EventColumns(columns.items[:n], None, columns.event_time_ms[:n])

    def csv_event(items: list, times: list, start: int, stop: int) -> bytes:
        return f"{items[start]},{times[start]}".encode()

    plan = {
        "batches": (columns, opts.batch, None),
        "csv": (prefix(opts.table_events), 1, csv_event),
        "single": (prefix(opts.per_record_events), 1, None),
    }
    out = {}
    for kind, (cols, per_message, encoder) in plan.items():
        topic = f"mb-{kind}"
        create_topics(bootstrap, [TopicSpec(topic, opts.partitions)])
        stops: dict[int, int] = {}
        t0 = time.monotonic()
        confluent_produce(
            bootstrap,
            topic,
            cols,
            per_message,
            partitions=opts.partitions,
            encode_message=encoder,
            end_markers=encoder is None,
            end_offsets=stops,
        )
        print(
            f"produced {len(cols):,} events to {topic} ({per_message} per message) "
            f"in {time.monotonic() - t0:.1f} s; end offsets {stops}",
            flush=True,
        )
        out[kind] = (topic, len(cols), stops)
    return out


def run_child(option: str, spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run one option in a fresh Python (its own JVM); ``{"error": ...}`` if it fails."""
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            option,
            "--spec",
            json.dumps(spec),
            "--result",
            result.name,
        ]
        proc = subprocess.Popen(cmd, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its JVM
            proc.wait()
            return {"error": f"timed out after {timeout_s:g} s"}
        text = Path(result.name).read_text()
        if code != 0 or not text:
            return {"error": f"exit code {code}"}
        return json.loads(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=4_000_000, help="events (producer-batch options)")
    parser.add_argument("--table-events", type=int, default=None, help="Table API option (default: --events)")
    parser.add_argument("--per-record-events", type=int, default=200_000, help="per-record option prefix")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1000, help="events per EventBatch message")
    parser.add_argument(
        "--window-ms", type=float, default=None, help="TUMBLE size (default: ~--batch events per partition)"
    )
    parser.add_argument(
        "--options", default=",".join(OPTIONS), help=f"comma-separated subset of {list(OPTIONS)}"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per option")
    parser.add_argument("--child", choices=OPTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        child(opts.child, json.loads(opts.spec), opts.result)
        return
    options = [o.strip() for o in opts.options.split(",") if o.strip()]
    unknown = set(options) - set(OPTIONS)
    if unknown:
        parser.error(f"--options: unknown {sorted(unknown)}; choose from {list(OPTIONS)}")
    opts.table_events = min(opts.events, opts.table_events or opts.events)
    opts.per_record_events = min(opts.events, opts.per_record_events)
    window_ms = opts.window_ms or opts.batch * opts.partitions * 1000 / RATE
    begin = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="bench-microbatch-") as tmp:
        topics = produce_topics(broker.bootstrap, opts)
        for i, option in enumerate(options):
            topic, events, stops = topics[OPTIONS[option][0]]
            spec = {
                "bootstrap": broker.bootstrap,
                "topic": topic,
                "events": events,
                "stops": stops,
                "ckpt": f"{tmp}/ckpt-{i}",
                "window_ms": window_ms,
            }
            print(f"--- {option}: {events:,} events from {topic}", flush=True)
            result = run_child(option, spec, opts.timeout)
            if result.get("counted", events) != events:
                result["error"] = f"the sketches counted {result['counted']:,} of {events:,} events"
            if "error" not in result:
                result["events_per_s"] = result["events"] / result["seconds"]
            results[option] = result
            print(f"    {result}", flush=True)
    total = time.monotonic() - begin

    print(f"\n{'option':26s} {'events':>11s} {'seconds':>8s} {'events/s':>11s}")
    for option, r in results.items():
        if "error" in r:
            print(f"{option:26s} not measured: {r['error']}")
        else:
            print(f"{option:26s} {r['events']:>11,} {r['seconds']:>8.1f} {r['events_per_s']:>11,.0f}")
    print(
        f"(window {window_ms:g} ms, batch {opts.batch}, {opts.partitions} partitions; total run {total:.0f} s)"
    )
    summary = {
        "partitions": opts.partitions,
        "batch": opts.batch,
        "window_ms": window_ms,
        "total_seconds": round(total, 1),
        "options": {
            option: {k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}
            for option, r in results.items()
        },
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
