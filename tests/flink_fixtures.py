"""Flink fixtures: connector jars, a broker for Flink tests, a shared synthetic stream, job runners.

The Flink tests share one produced stream (``hh_stream``, session scope) and one failure-free
reference run (``hh_reference_run``) so that each job starts only once per session; the machine
is small, so keep new Flink tests few and reuse these.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:
    from privstream.jobs.config import HeavyHittersConfig, TestHooks


@pytest.fixture(scope="session")
def flink_connector_jars() -> list[Path]:
    from privstream.connectors.flink_jars import ensure_connector_jars

    return ensure_connector_jars()


@pytest.fixture(scope="session")
def flink_broker(kafka_broker: Any) -> Any:
    """The session's embedded broker (``tests/kafka_fixtures.py``), for the Flink tests."""
    return kafka_broker


#: The environment before any in-process Flink job ran (PyFlink's loopback mode changes
#: ``os.environ``, e.g. ``PYFLINK_GATEWAY_DISABLED``, which would break a child Python's own gateway).
_ENV_AT_START = dict(os.environ)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for child processes: as at session start, plus ``extra``."""
    return {**_ENV_AT_START, **extra}


def ctrl_c_reaches_the_child() -> None:
    """``preexec_fn`` of a child a test stops with SIGINT: the default disposition, so the child's
    Python installs its KeyboardInterrupt handler even when pytest itself was started with SIGINT
    ignored (a ``command &`` of a shell without job control), which a child would inherit."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def fresh_name(prefix: str) -> str:
    """A unique topic / output-prefix name."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, compacted: bool = False) -> str:
    from privstream.connectors.topics import TopicSpec, create_topics

    create_topics(bootstrap, [TopicSpec(name, partitions, compacted=compacted)])
    return name


def read_topic(
    bootstrap: str, topic: str, *, expect: int | None = None, idle_s: float = 3.0, timeout_s: float = 120.0
) -> list[dict[str, Any]]:
    """Decoded records of ``topic`` read with ``read_committed``, in partition/offset order.

    Stops when ``expect`` records were read (then waits ``idle_s`` more to catch duplicates), or
    when nothing arrived for ``idle_s`` with ``expect=None``; after ``timeout_s`` in any case."""
    from privstream.connectors.consume import read_topic as read_committed

    records = read_committed(bootstrap, topic, idle_s=idle_s, expect=expect, timeout_s=timeout_s)
    return [r.value for r in records]


def one_per(records: list[dict], key: Callable[[dict], Any], fields: tuple[str, ...]) -> dict:
    """``records`` by ``key``, the ``fields`` of each; asserts that every copy of a key (a replay
    after a restore, or an aborted record this broker shows) has the same fields."""
    out: dict = {}
    for record in records:
        value = {f: record[f] for f in fields}
        assert out.setdefault(key(record), value) == value, key(record)
    return out


def fields_but(records: list[dict[str, Any]], *ignore: str) -> tuple[str, ...]:
    """Every field of ``records`` but ``ignore`` (e.g. a wall-clock time), for :func:`one_per`."""
    return tuple(sorted({f for r in records for f in r} - set(ignore)))


def read_distinct(
    bootstrap: str,
    topic: str,
    key: Callable[[dict[str, Any]], Any],
    expect: int,
    *,
    ignore: tuple[str, ...] = (),
    settle_s: float = 1.0,
    timeout_s: float = 240.0,
) -> dict[Any, dict[str, Any]]:
    """The committed records of ``topic`` by ``key``, read until ``expect`` distinct keys arrived
    and then ``settle_s`` more. tansu shows records of aborted transactions to ``read_committed``
    readers too (docs/stack-facts.md), so a replay after a restore may appear twice: every copy of a
    key must be identical (all fields but ``ignore``, e.g. a wall-clock time)."""
    from privstream.connectors.consume import committed_reader

    values: list[dict[str, Any]] = []
    reached: float | None = None

    def until() -> bool:
        nonlocal reached
        if reached is None and len({key(v) for v in values}) >= expect:
            reached = time.monotonic()
        return reached is not None and time.monotonic() - reached >= settle_s

    with committed_reader(bootstrap, topic) as reader, contextlib.suppress(TimeoutError):
        for record in reader.records(until=until, timeout_s=timeout_s):
            values.append(record.value)
    return one_per(values, key, fields_but(values, *ignore))


def read_matching(
    bootstrap: str,
    topic: str,
    wanted: Callable[[dict[str, Any]], bool],
    expect: int,
    *,
    settle_s: float = 2.0,
    timeout_s: float = 120.0,
) -> list[dict[str, Any]]:
    """The decoded committed records of ``topic`` that ``wanted`` accepts, in partition/offset
    order, read until ``expect`` of them arrived and then ``settle_s`` more (to catch duplicates)
    even while other records keep arriving (a running job's ledger heartbeats); after ``timeout_s``
    in any case."""
    from privstream.connectors.consume import committed_reader

    out: list[Any] = []
    reached: float | None = None  # when the expected count was first reached

    def until() -> bool:
        nonlocal reached
        if reached is None and len(out) >= expect:
            reached = time.monotonic()
        return reached is not None and time.monotonic() - reached >= settle_s

    with committed_reader(bootstrap, topic) as reader, contextlib.suppress(TimeoutError):
        for record in reader.records(until=until, timeout_s=timeout_s):
            if wanted(record.value):
                out.append(record)
    return [r.value for r in sorted(out, key=lambda r: (r.partition, r.offset))]


@dataclass
class ProducedStream:
    """A synthetic stream on ``topic``: ``batches[p]`` are partition p's EventBatch item arrays in order."""

    bootstrap: str
    topic: str
    partitions: int
    batch_size: int
    batches: dict[int, list[np.ndarray]] = field(default_factory=dict)
    times: dict[int, list[np.ndarray]] = field(default_factory=dict)  #: event times (ms) of each batch
    malformed: dict[int, int] = field(default_factory=dict)  #: partition -> malformed messages sent

    @property
    def items(self) -> np.ndarray:
        return np.concatenate([b for p in sorted(self.batches) for b in self.batches[p]])


class PhasedProducer:
    """Produces the test stream in two phases: the first half of the events and an ``EpochWatermark``
    punctuation (the first event time of the second half: event times never go back), then the rest
    and the EndMarkers. Zipf events as EventBatch messages partitioned by a hash of the item (the
    producer's only partitioners are data-independent), optionally one malformed message. The
    expected per-partition batches are computed here from :func:`partition_for` the way the
    producer groups each ``send``: the events of one partition in order, cut every ``batch_size``.
    :meth:`second` splits the second phase (all but partition 0's last batches, then :meth:`rest`).
    ``after_end_partition``: one more event message (an item of that partition) after its EndMarker,
    which the job must dead-letter, not count."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: int = 3,
        events: int = 60_000,
        batch_size: int = 500,
        seed: int = 11,
        malformed_partition: int | None = 1,
        after_end_partition: int | None = None,
        **producer_config: Any,
    ) -> None:
        from privstream.connectors.produce import EventProducer

        from privstream.datagen import generate_events
        from privstream.partitioning import partition_for

        create_topic(bootstrap, topic, partitions)
        self.columns = generate_events(
            "zipf", events, seed=seed, universe=2000, rate=10_000.0, start_time_ms=1_700_000_000_000
        )
        self.half = (events // batch_size // 2) * batch_size
        self.malformed_partition = malformed_partition
        self.after_end_partition = after_end_partition
        self._unsent: np.ndarray | None = None  # second-half events held back by second()
        self.producer = EventProducer(
            bootstrap, topic, events_per_message=batch_size, key_by="item", **producer_config
        )
        self.stream = ProducedStream(
            bootstrap, topic, partitions, batch_size, {p: [] for p in range(partitions)}
        )
        items = np.asarray(self.columns.items, dtype=np.int64)
        times = np.asarray(self.columns.event_time_ms, dtype=np.int64)
        self.parts = parts = partition_for(items, partitions)
        for lo, hi in ((0, self.half), (self.half, events)):
            for p in range(partitions):
                idx = np.flatnonzero(parts[lo:hi] == p) + lo
                for start in range(0, len(idx), batch_size):
                    chunk = idx[start : start + batch_size]
                    self.stream.batches[p].append(items[chunk])
                    self.stream.times.setdefault(p, []).append(times[chunk])

    def stop_offsets(self) -> dict[int, int]:
        """Offsets after each partition's last message (offsets are contiguous from 0 on a fresh
        topic): the batches, the phase-1 punctuation, the malformed message (if any), the EndMarker
        and the message after it (if any)."""
        extra = {p: 0 for p in self.stream.batches}
        for p in (self.malformed_partition, self.after_end_partition):
            if p is not None:
                extra[p] += 1
        return {p: len(b) + 1 + extra[p] + 1 for p, b in self.stream.batches.items()}

    def first(self) -> None:
        self.producer.send(self.columns.items[: self.half], None, self.columns.event_time_ms[: self.half])
        self.producer.punctuate(int(self.columns.event_time_ms[self.half]))
        if self.malformed_partition is not None:
            self.producer._producer.send(
                self.stream.topic, value=b"\x00not avro", partition=self.malformed_partition
            )
            self.stream.malformed[self.malformed_partition] = 1
            self.producer.flush()

    def second(self, held_batches: int) -> int:
        """Send the second half except the last ``held_batches`` batches of partition 0 (the shard an
        injected failure watches): the same per-partition batches, :meth:`rest` sends the held ones.
        Returns how many events partition 0 has been sent."""
        rest = np.arange(self.half, len(self.parts))
        p0 = rest[self.parts[rest] == 0]
        held = sum(len(b) for b in self.stream.batches[0][len(self.stream.batches[0]) - held_batches :])
        self._unsent = p0[len(p0) - held :]
        self._send(np.setdiff1d(rest, self._unsent))  # sorted: the events keep their order
        self.producer.flush()
        return int(np.count_nonzero(self.parts == 0)) - held

    def _send(self, idx: np.ndarray) -> None:
        self.producer.send(self.columns.items[idx], None, self.columns.event_time_ms[idx])

    def rest(self) -> ProducedStream:
        self._send(np.arange(self.half, len(self.parts)) if self._unsent is None else self._unsent)
        self.producer.finish()
        if self.after_end_partition is not None:  # an ordinary event message after the EndMarker
            self._send(np.flatnonzero(self.parts == self.after_end_partition)[:1])
            self.producer.flush()
        self.producer.close()
        return self.stream


def produce_stream(bootstrap: str, topic: str, **kwargs: Any) -> ProducedStream:
    phased = PhasedProducer(bootstrap, topic, **kwargs)
    phased.first()
    return phased.rest()


#: The test noise seed of every seeded run (the reference run's releases are recomputed from core with it).
NOISE_SEED = 7


def seeded(out_prefix: str, *, fail_marker: str | None = None, fail_after: int = 0) -> TestHooks:
    """TESTS ONLY hooks: seeded noise (:data:`NOISE_SEED`), the pre-noise sketches exposed on
    ``<out_prefix>-sketches``, and an injected failure if ``fail_marker``."""
    from privstream.jobs.config import TestHooks

    return TestHooks(
        noise_seed=NOISE_SEED,
        fail_marker=fail_marker,
        fail_after=fail_after,
        expose_sketches_topic=f"{out_prefix}-sketches",
    )


def job_config(
    stream: ProducedStream,
    out_prefix: str,
    *,
    k: int = 32,
    epoch: int | timedelta = 8000,
    stop_offsets: dict[int, int] | None = None,
    **options: Any,
) -> HeavyHittersConfig:
    """The heavy-hitters config for ``stream`` with output topics named after ``out_prefix`` (the
    pre-noise sketches are a test hook: :func:`seeded`); bounded by the EndMarkers (scanned before the start) or by
    explicit ``stop_offsets``; ``options`` are further config fields."""
    from privstream.jobs.config import HeavyHittersConfig

    return HeavyHittersConfig(
        bootstrap=stream.bootstrap,
        topic=stream.topic,
        epsilon=1.0,
        delta=1e-6,
        k=k,
        epoch=epoch,
        releases_topic=f"{out_prefix}-releases",
        ledger_topic=f"{out_prefix}-ledger",
        dlq_topic=f"{out_prefix}-dlq",
        ledger_id=f"test/{out_prefix}",
        checkpoint_interval=timedelta(milliseconds=500),
        ledger_lease=timedelta(seconds=3),  # a restart over the same ledger waits at most this
        stop_offsets=stop_offsets,
        stop_at_end_markers=stop_offsets is None,
        **options,
    )


@dataclass
class JobOutputs:
    releases: list[dict[str, Any]]
    sketches: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]


def read_outputs(
    bootstrap: str,
    out_prefix: str,
    expect_releases: int,
    sketches_per_release: int = 1,
    dead_letters: int = 1,
) -> JobOutputs:
    """The job's committed outputs, each topic read until its expected count and then 2 s more (to
    catch duplicates); ``sketches_per_release``: pre-noise snapshots per epoch (the number of shards
    for a per-shard release, 1 for a merged one); ``dead_letters``: how many are expected."""

    def records(suffix: str, expect: int) -> list[dict[str, Any]]:
        return read_topic(bootstrap, f"{out_prefix}-{suffix}", expect=expect, idle_s=2.0)

    return JobOutputs(
        releases=records("releases", expect_releases),
        sketches=records("sketches", expect_releases * sketches_per_release),
        # entries, not start-up fences or a running job's heartbeats
        ledger=read_matching(bootstrap, f"{out_prefix}-ledger", lambda r: "entry" in r, expect_releases),
        dead_letters=records("dlq", dead_letters),
    )


def run_job_to_end(config: HeavyHittersConfig, hooks: TestHooks) -> None:
    """Run the heavy-hitters job in this process until its bounded source is exhausted, with the
    test ``hooks`` (usually :func:`seeded`)."""
    from privstream.jobs.job import HeavyHittersJob

    HeavyHittersJob(config, hooks=hooks).run()


@pytest.fixture(scope="session")
def hh_stream(flink_broker: Any, flink_connector_jars: list[Path]) -> ProducedStream:
    return produce_stream(flink_broker.bootstrap, fresh_name("hh-events"))


@pytest.fixture(scope="session")
def hh_reference_run(hh_stream: ProducedStream) -> JobOutputs:
    """One failure-free run of the job over ``hh_stream`` (3 count epochs per shard; the default
    per-shard release, so one pre-noise snapshot per shard and epoch)."""
    prefix = fresh_name("ref")
    run_job_to_end(job_config(hh_stream, prefix), seeded(prefix))
    return read_outputs(
        hh_stream.bootstrap, prefix, expect_releases=3, sketches_per_release=hh_stream.partitions
    )


def start_job(config: HeavyHittersConfig, hooks: TestHooks) -> Any:
    """Submit the heavy-hitters job asynchronously in this process with the test ``hooks`` (usually
    :func:`seeded`); returns the PyFlink ``JobClient``."""
    from privstream.jobs.job import HeavyHittersJob

    return HeavyHittersJob(config, hooks=hooks).start()


def rest_get(rest_port: int, path: str) -> Any:
    """A GET of a MiniCluster's REST API (with ``rest.port`` set), decoded JSON."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{rest_port}{path}", timeout=10) as resp:
        return json.load(resp)


def privstream_metrics(web_ui: str | int) -> dict[str, float]:
    """Every ``privstream`` metric of the MiniCluster's running job through Flink's REST API (what
    its web UI shows; ``web_ui``: its address or REST port), summed over vertices and subtasks
    (REST ids are ``<subtask>.<operator>.privstream.<name>``)."""
    import json
    import urllib.request
    from urllib.parse import quote

    base_url = web_ui if isinstance(web_ui, str) else f"http://127.0.0.1:{web_ui}"

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"{base_url}{path}", timeout=10) as resp:
            return json.load(resp)

    (job,) = [j for j in get("/jobs/overview")["jobs"] if j["state"] == "RUNNING"]
    totals: dict[str, float] = {}
    for vertex in get(f"/jobs/{job['jid']}")["vertices"]:
        base = f"/jobs/{job['jid']}/vertices/{vertex['id']}/metrics"
        ids = [m["id"] for m in get(base) if ".privstream." in m["id"]]
        if ids:  # "+" (in "release + ledger") must be escaped; escaped brackets are not found (measured)
            for metric in get(f"{base}?get={','.join(quote(i, safe='()') for i in ids)}"):
                name = metric["id"].rsplit(".privstream.", 1)[1]
                totals[name] = totals.get(name, 0.0) + float(metric["value"])
    return totals


def assert_subtasks_read(
    rest: Callable[[str], Any],
    jid: str,
    vertex: Callable[[str], bool],
    parallelism: int,
    taskmanagers: int | None = None,
) -> None:
    """The job's vertex whose name ``vertex`` accepts runs ``parallelism`` sub-tasks — spread over
    ``taskmanagers`` TaskManagers if given, one each — and every sub-task has read records (waited
    for: the REST API's metrics trail the job). ``rest``: a GET of the cluster's REST API."""
    [found] = [v for v in rest(f"/jobs/{jid}")["vertices"] if vertex(v["name"])]
    assert found["parallelism"] == parallelism, found
    if taskmanagers is not None:
        where = rest(f"/jobs/{jid}/vertices/{found['id']}/taskmanagers")["taskmanagers"]
        assert len({tm["taskmanager-id"] for tm in where}) == taskmanagers, where

    def reading() -> dict[str, float]:
        subtasks = rest(f"/jobs/{jid}/vertices/{found['id']}")["subtasks"]
        return {
            "subtasks": len(subtasks),
            "least read": min(st["metrics"]["read-records"] for st in subtasks),
        }

    wait_for_metrics(
        f"every sub-task of {found['name']!r} to read records",
        reading,
        {"subtasks": parallelism, "least read": lambda n: n > 0},
    )


def wait_for_metrics(
    where: str,
    read: Callable[[], dict[str, float]],
    expected: dict[str, float | Callable[[float], bool]],
    timeout_s: float = 120,
) -> dict[str, float]:
    """Read until the metrics show ``expected`` (a value, or a predicate on it; an absent metric
    reads 0: a counter never incremented is not reported). PyFlink ships a Python operator's
    metrics to the JVM when a bundle ends. Returns all of them."""

    def meets(seen: dict[str, float]) -> bool:
        return all(
            want(seen.get(name, 0.0)) if callable(want) else seen.get(name, 0.0) == want
            for name, want in expected.items()
        )

    deadline, seen = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        try:
            seen = read()
        except (OSError, ValueError):
            seen = {}  # the REST endpoint or the reporter starts with the MiniCluster
        if meets(seen):
            return seen
        time.sleep(0.5)  # a poll interval, not a wait for the job
    raise AssertionError(f"{where} never showed {expected}: {seen}")


def trigger_checkpoint(rest_port: int, job_id: str, timeout_s: float = 60.0) -> int:
    """Trigger a checkpoint of a running job through Flink's REST API (the MiniCluster's, with
    ``rest.port`` set) and wait until it completed; returns its id. With a long periodic interval
    this lets a test decide when the job's Kafka transactions commit."""
    import json
    import urllib.request

    url = f"http://127.0.0.1:{rest_port}/jobs/{job_id}/checkpoints"
    post = urllib.request.Request(
        url, data=b"{}", headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(post, timeout=10) as resp:
        trigger = json.load(resp)["request-id"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = rest_get(rest_port, f"/jobs/{job_id}/checkpoints/{trigger}")
        if status["status"]["id"] == "COMPLETED":
            operation = status.get("operation") or {}
            if "checkpointId" not in operation:
                raise RuntimeError(f"checkpoint of job {job_id} failed: {operation}")
            return int(operation["checkpointId"])
        time.sleep(0.2)
    raise TimeoutError(f"checkpoint of job {job_id} not completed after {timeout_s:g} s")


class StandaloneCluster:
    """PyFlink's own ``bin/start-cluster.sh`` on loopback, with its config, logs and pid files in
    ``workdir``: one JobManager and ``taskmanagers`` TaskManagers of ``slots`` slots each (one line
    per TaskManager in ``conf/workers``); ``submit(...)`` runs ``bin/flink run -py``; ``stop()`` runs
    ``bin/stop-cluster.sh``."""

    def __init__(self, workdir: Path, *, taskmanagers: int = 1, slots: int = 2) -> None:
        import sys

        import pyflink
        from privstream.connectors.clients import free_port

        self.home = Path(pyflink.__file__).parent
        self.workdir = workdir
        self.taskmanagers = taskmanagers
        self.rest_port, rpc_port = free_port(), free_port()
        conf = workdir / "conf"
        conf.mkdir(parents=True)
        (workdir / "log").mkdir()
        # PyFlink's lib/ lacks flink-python (it is in opt/): the cluster needs it to run Python
        # operators, so the cluster gets its own lib/ of links (the installed package is untouched).
        lib = workdir / "lib"
        lib.mkdir()
        for jar in [*(self.home / "lib").glob("*.jar"), *(self.home / "opt").glob("flink-python-*.jar")]:
            (lib / jar.name).symlink_to(jar)
        for name in ("log4j.properties", "log4j-cli.properties", "log4j-console.properties"):
            (conf / name).write_text((self.home / "conf" / name).read_text())
        (conf / "workers").write_text("localhost\n" * taskmanagers)
        (conf / "masters").write_text(f"localhost:{self.rest_port}\n")
        java_opts = ""
        for line in (self.home / "conf" / "config.yaml").read_text().splitlines():
            if line.strip().startswith("all:"):
                java_opts = line.split("all:", 1)[1].strip()
        settings = {
            "env.java.opts.all": java_opts,
            "env.pid.dir": str(workdir),
            "env.log.dir": str(workdir / "log"),
            "jobmanager.rpc.address": "localhost",
            "jobmanager.rpc.port": rpc_port,
            "jobmanager.bind-host": "localhost",
            "taskmanager.bind-host": "localhost",
            "taskmanager.host": "localhost",
            "rest.address": "localhost",
            "rest.bind-address": "localhost",
            "rest.port": self.rest_port,
            "jobmanager.memory.process.size": "1024m",
            "taskmanager.memory.process.size": "1728m",
            "taskmanager.numberOfTaskSlots": slots,
            "heartbeat.interval": 2000,  # a killed TaskManager is noticed within heartbeat.timeout
            "heartbeat.timeout": 10000,
            "python.executable": sys.executable,
        }
        (conf / "config.yaml").write_text("".join(f"{k}: {json_scalar(v)}\n" for k, v in settings.items()))
        self.env = clean_env(
            FLINK_CONF_DIR=str(conf),
            FLINK_LOG_DIR=str(workdir / "log"),
            PYFLINK_CLIENT_EXECUTABLE=sys.executable,
            FLINK_HOME=str(self.home),
            FLINK_LIB_DIR=str(lib),
        )

    def _bin(self, name: str, *args: str, timeout: float = 120.0) -> Any:
        import subprocess

        return subprocess.run(
            ["bash", str(self.home / "bin" / name), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, timeout_s: float = 90.0) -> None:
        import urllib.request

        proc = self._bin("start-cluster.sh")
        if proc.returncode != 0:
            raise RuntimeError(f"start-cluster.sh failed: {proc.stdout}\n{proc.stderr}")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://localhost:{self.rest_port}/overview", timeout=2) as resp:
                    import json

                    if json.load(resp).get("taskmanagers", 0) >= self.taskmanagers:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"standalone cluster did not come up; logs in {self.workdir / 'log'}")

    def submit(self, script: Path, *args: str, timeout_s: float = 300.0, detached: bool = False) -> Any:
        flags = ["-d"] if detached else []
        return self._bin(
            "flink", "run", *flags, "-m", f"localhost:{self.rest_port}", "-py", str(script), *args,
            timeout=timeout_s,
        )  # fmt: skip

    def rest(self, path: str) -> Any:
        """A GET of the cluster's REST API (decoded JSON)."""
        return rest_get(self.rest_port, path)

    def cancel(self, jid: str) -> None:
        """Cancel a job (REST ``PATCH /jobs/<jid>?mode=cancel``; returns once it was accepted)."""
        import urllib.request

        request = urllib.request.Request(
            f"http://localhost:{self.rest_port}/jobs/{jid}?mode=cancel", method="PATCH"
        )
        urllib.request.urlopen(request, timeout=30).close()

    def taskmanager_pids(self) -> list[int]:
        """The TaskManager processes (from their pid file)."""
        pids = []
        for pid_file in self.workdir.glob("*taskexecutor.pid"):
            pids += [int(line) for line in pid_file.read_text().split() if line.strip()]
        return pids

    def start_taskmanager(self) -> None:
        proc = self._bin("taskmanager.sh", "start")
        if proc.returncode != 0:
            raise RuntimeError(f"taskmanager.sh start failed: {proc.stdout}\n{proc.stderr}")

    def stop(self) -> None:
        self._bin("stop-cluster.sh", timeout=60.0)


def json_scalar(value: object) -> str:
    import json

    return json.dumps(value) if isinstance(value, str) else str(value)


@contextlib.contextmanager
def running_cluster(workdir: Path, **shape: int) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(workdir, **shape)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    """One TaskManager of two slots."""
    with running_cluster(tmp_path / "flink") as cluster:
        yield cluster


@pytest.fixture
def two_taskmanager_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    """Two TaskManagers of one slot each: a job at parallelism 2 must use both processes."""
    with running_cluster(tmp_path / "flink", taskmanagers=2, slots=1) as cluster:
        yield cluster
