"""What a job launched by ``privstream run`` reports: a start banner, progress, an end summary and
the exit status.

The launcher draws the submission's run id (:func:`~privstream.connectors.run_ids.new_run_id`),
which the job stamps into every release and dead letter, and describes the run as a
:class:`RunPlan`. :class:`RunMonitor` then logs (``logging``, INFO, logger ``privstream.jobs.run_report``)

- the banner: job, run id and how to select its output, input and output topics, the budget of one
  release and the ledger's total, the Flink web UI address (:func:`web_ui_settings`);
- progress every ``interval_s`` while anything changed: what the job itself committed, read back
  from its own output topics with ``read_committed`` (releases and refusals of this run, dead
  letters of this run, the ledger's spent budget) plus the messages the source has read according
  to Flink's REST API when the UI is up; and one line the first time each kind of dead letter
  appears (e.g. a continual-monitor rerun's leftover updates of an earlier run, or misrouted events);
- the summary once the job ends (a bounded run): the same counts, the budget left, where to look;
  on Ctrl-C instead one line: how far the committed releases go (:func:`interrupted_line`).

:func:`exit_status` turns the counts into the command's exit status: :data:`EXIT_NOTHING_RELEASED`
with one line saying why and what to do when the run released nothing because the budget refused
every release, or because every message was dead-lettered (e.g. misrouted shards).
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

EXIT_NOTHING_RELEASED = 3  #: exit status of a run that released nothing (all refused / dead-lettered)
REST_PORT_TAKEN = "Could not start rest endpoint"  #: Flink's failure when the web UI's port is taken
RELEASE_SCHEMAS = frozenset({"Release", "WindowRelease", "LdpRelease"})  #: what counts as a release
WEB_UI_KEYS = ("rest.port", "rest.bind-port")  #: Flink options that already choose the REST port


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--progress-interval``: how often a running job logs its progress."""
    parser.add_argument(
        "--progress-interval",
        default="10s",
        help="log the run's progress (releases, refusals, dead letters, budget spent) this often, "
        "when it changed (default: %(default)s)",
    )


def progress_interval_s(args: argparse.Namespace) -> float:
    """``--progress-interval`` in seconds (ValueError naming the option)."""
    from privstream.connectors.validation import parse_duration_ms

    return parse_duration_ms(getattr(args, "progress_interval", "10s"), "--progress-interval") / 1000


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def web_ui_settings(
    flink_conf: Iterable[tuple[str, str]],
) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """The Flink settings that make the local MiniCluster's REST endpoint and web UI reachable, and
    its address: ``rest.bind-port`` on a free port (and metrics fetched every 2 s) unless ``flink_conf`` already sets ``rest.port``
    or ``rest.bind-port`` (then that port; a range's first port). A job submitted to a cluster by
    ``flink run -py`` (whose Java client starts this Python with ``PYFLINK_GATEWAY_PORT``) runs on no
    local MiniCluster: no settings, no address (the cluster's own UI applies)."""
    import os

    if "PYFLINK_GATEWAY_PORT" in os.environ:
        return (), None
    given = dict(flink_conf)
    for key in WEB_UI_KEYS:
        if key in given:
            port = given[key].split("-")[0].split(",")[0].strip()
            return (), f"http://127.0.0.1:{port}"
    port_number = free_port()
    settings = (
        ("rest.bind-port", str(port_number)),
        ("metrics.fetcher.update-interval", "2000"),  # the REST API's metrics at most 2 s old (10 s)
    )
    return settings, f"http://127.0.0.1:{port_number}"


@dataclass(frozen=True)
class RunPlan:
    """One submission, as its banner, progress and summary describe it."""

    job: str  #: the ``privstream run`` job name, e.g. ``heavy-hitters``
    run_id: str
    bootstrap: str
    input_topic: str
    releases_topic: str
    dlq_topic: str
    ledger_topic: str | None = None
    ledger_id: str | None = None
    per_release: str = ""  #: the budget of one release, e.g. ``(ε=1, δ=1e-06) per epoch``
    total: str = ""  #: the ledger's total, e.g. ``(ε=3, δ=1e-05)``
    web_ui: str | None = None  #: the Flink web UI / REST address, None if there is none
    flink_job_name: str | None = None  #: the Flink job's name (to find it through the REST API)
    source_table: str = "privstream_events"  #: the input source's table name (in its vertex's name)
    other_outputs: tuple[str, ...] = ()  #: further topics the job writes, described

    @classmethod
    def of(cls, job: str, config: Any, web_ui: str | None, **fields: Any) -> RunPlan:
        """The plan of a job ``config`` with the jobs' common field names (``bootstrap``, ``topic``,
        ``releases_topic``, ``dlq_topic``, ``job_name``, ``run_id``); ``fields`` override or add."""
        common = {
            "run_id": getattr(config, "run_id", None) or "",
            "bootstrap": config.bootstrap,
            "input_topic": getattr(config, "topic", ""),
            "releases_topic": config.releases_topic,
            "dlq_topic": getattr(config, "dlq_topic", ""),
            "flink_job_name": config.job_name,
        }
        return cls(job=job, web_ui=web_ui, **{**common, **fields})

    def banner_lines(self) -> list[str]:
        """The start banner."""
        outputs = [f"releases → {self.releases_topic}", f"dead letters → {self.dlq_topic}"]
        if self.ledger_topic:
            outputs.insert(1, f"ledger → {self.ledger_topic}")
        budget = self.per_release
        if self.total:
            budget += (
                f"; ledger {self.ledger_id!r} total {self.total}"
                if self.ledger_id
                else f"; total {self.total}"
            )
        ui = (
            f"Flink web UI: {self.web_ui}"
            if self.web_ui
            else "Flink web UI: the cluster's own (submitted with `flink run`: no local MiniCluster)"
        )
        return [
            f"starting {self.job} (run {self.run_id})",
            f"  input: {self.input_topic} on {self.bootstrap}",
            "  output: " + ", ".join([*outputs, *self.other_outputs]),
            f"  budget: {budget}" if budget else "  budget: see the job's options",
            f"  {ui}",
            f"  select this run's output: privstream releases {self.job} --run {self.run_id}"
            f"  (or privstream tail {self.releases_topic} --run {self.run_id})",
        ]


@dataclass
class RunCounts:
    """What the run has committed so far, read back from its own output topics."""

    releases: int = 0  #: releases of this run
    refused: int = 0  #: ReleaseRefused records of this run (budget exhausted)
    dead_letters: int = 0  #: dead letters of this run
    other_runs: int = 0  #: records of other runs (or of none) on the same topics, ignored
    messages_read: int | None = None  #: messages the source emitted (Flink's REST API), if known
    ledger: dict[str, Any] | None = None  #: the latest LedgerEntry of the run's ledger id
    last_refusal: dict[str, Any] | None = None
    last_release: str | None = None  #: where the latest release of this run stands, e.g. ``epoch 4``
    dead_letter_reasons: Counter[str] = field(default_factory=Counter)

    def add(self, schema: str, value: Mapping[str, Any], run_id: str, ledger_id: str | None) -> None:
        """Count one decoded record of the releases, dead-letter or ledger topic."""
        if schema == "LedgerEntry":
            if value.get("ledger_id") == ledger_id and (
                self.ledger is None or int(value["sequence"]) >= int(self.ledger["sequence"])
            ):
                self.ledger = dict(value)
            return
        if schema == "LedgerFence":
            return
        if value.get("run_id") != run_id:
            self.other_runs += 1
        elif schema in RELEASE_SCHEMAS:
            self.releases += 1
            self.last_release = _position(schema, value)
        elif schema == "ReleaseRefused":
            self.refused += 1
            self.last_refusal = dict(value)
        elif schema == "DeadLetter":
            self.dead_letters += 1
            self.dead_letter_reasons[_reason(str(value.get("error", "")))] += 1

    def budget_text(self) -> str:
        """``ε=… of ε=… spent (δ=… of δ=…)`` from the ledger, or the last refusal; empty if unknown."""
        source = self.ledger or self.last_refusal
        if source is None:
            return ""
        return (
            f"ε={source['epsilon_spent']:g} of ε={source['epsilon_total']:g} spent "
            f"(δ={source['delta_spent']:g} of δ={source['delta_total']:g})"
        )

    def progress_line(self) -> str:
        """One progress line."""
        parts = []
        if self.messages_read is not None:
            parts.append(f"{self.messages_read} messages read")
        parts.append(f"{self.releases + self.refused} epochs/windows closed")
        parts.append(f"{self.releases} releases written")
        if self.refused:
            parts.append(f"{self.refused} refused")
        parts.append(f"{self.dead_letters} dead letters")
        budget = self.budget_text()
        if budget:
            parts.append(f"budget {budget}")
        return "progress: " + ", ".join(parts)

    def snapshot(self) -> tuple[Any, ...]:
        """What the progress line shows (to log only changes)."""
        return (self.messages_read, self.releases, self.refused, self.dead_letters, self.budget_text())


def _position(schema: str, value: Mapping[str, Any]) -> str:
    """Where a release stands in its stream: ``epoch N`` (Release, LdpRelease), the window's end of
    its shard (WindowRelease), or a Release's window of time."""
    if schema == "WindowRelease":
        end = value.get("window_end")
        return f"the window ending at {value['position'] if end is None else end} of shard {value['shard']}"
    if value.get("epoch") is not None:
        return f"epoch {value['epoch']}"
    return f"the window ending at {value.get('window_end')}"


def _reason(error: str) -> str:
    """A dead letter's reason without its per-message details (the text before the first colon
    after the exception name, at most 80 characters)."""
    head = error.split(": ", 2)
    text = ": ".join(head[:2]) if head[0].endswith("Error") and len(head) > 1 else head[0]
    return text[:80]


def exit_status(plan: RunPlan, counts: RunCounts) -> tuple[int, str | None]:
    """``(status, one line)`` of an ended run: :data:`EXIT_NOTHING_RELEASED` and why if it released
    nothing although the budget refused releases or messages were dead-lettered, else ``(0, None)``."""
    if counts.releases:
        return 0, None
    if counts.refused:
        refusal = counts.last_refusal or {}
        ledger_id = refusal.get("ledger_id") or plan.ledger_id
        spent = (
            f"(ε={refusal['epsilon_spent']:g}) of (ε={refusal['epsilon_total']:g})"
            if "epsilon_spent" in refusal
            else "its total"
        )
        return EXIT_NOTHING_RELEASED, (
            f"nothing released: all {counts.refused} releases of run {plan.run_id} were refused, "
            f"ledger {ledger_id!r} has spent {spent}: start with a new --ledger-id and "
            f"--total-epsilon, see `privstream ledger show {ledger_id}`"
        )
    if counts.dead_letters:
        reason, _ = counts.dead_letter_reasons.most_common(1)[0]
        return EXIT_NOTHING_RELEASED, (
            f"nothing released: {counts.dead_letters} messages of run {plan.run_id} were dead-lettered "
            f"(mostly {reason!r}): check how the producers route and encode events, see "
            f"`privstream tail {plan.dlq_topic} --run {plan.run_id}`"
        )
    return 0, None


def interrupted_line(plan: RunPlan, counts: RunCounts) -> str:
    """The one line Ctrl-C prints: how far the run's committed releases go, and how to read them."""
    where = f"{plan.releases_topic!r} (privstream tail {plan.releases_topic} --run {plan.run_id})"
    if not counts.releases:
        return f"privstream run: stopped; no release of run {plan.run_id} committed yet on {where}"
    refused = f", {counts.refused} refused" if counts.refused else ""
    return (
        f"privstream run: stopped; releases committed up to {counts.last_release} "
        f"({counts.releases} releases{refused} of run {plan.run_id}) on {where}"
    )


def summary_lines(plan: RunPlan, counts: RunCounts) -> list[str]:
    """The end summary."""
    lines = [
        f"finished {plan.job} (run {plan.run_id}): {counts.releases} releases written, "
        f"{counts.refused} refused, {counts.dead_letters} dead letters"
    ]
    budget = counts.budget_text()
    if budget:
        source = counts.ledger or counts.last_refusal or {}
        left = float(source["epsilon_total"]) - float(source["epsilon_spent"])
        lines.append(f"  budget: {budget}; ε={max(left, 0.0):g} left on ledger {plan.ledger_id!r}")
    lines.append(f"  releases: privstream tail {plan.releases_topic} --run {plan.run_id}")
    if counts.dead_letters:
        lines.append(f"  dead letters: privstream tail {plan.dlq_topic} --run {plan.run_id}")
    if plan.ledger_id:
        lines.append(f"  ledger: privstream ledger show {plan.ledger_id}")
    return lines


def source_messages(vertices: Iterable[Mapping[str, Any]], table: str) -> int | None:
    """The messages the job's input source emitted: ``write-records`` of the source vertices whose
    name names the input's table (a job such as continual-monitor has a second source, its updates
    topic, which does not count); None if no vertex names it."""
    import re

    word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(table)}(?![A-Za-z0-9_])")
    counts = [
        int(v.get("metrics", {}).get("write-records", 0))
        for v in vertices
        if str(v.get("name", "")).startswith("Source") and word.search(str(v.get("name", "")))
    ]
    return sum(counts) if counts else None


class RunMonitor:
    """Reads the run's output topics (``read_committed``) in a background thread and logs the
    banner, progress every ``interval_s`` seconds (when something changed) and the summary."""

    def __init__(self, plan: RunPlan, *, interval_s: float = 10.0) -> None:
        self.plan = plan
        self.interval_s = interval_s
        self.counts = RunCounts()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._readers: list[Any] = []
        self._logged: tuple[Any, ...] | None = None
        self._warned = False
        self._reasons_told: set[str] = set()

    def start(self, *, background: bool = True) -> RunMonitor:
        """Log the banner and start reading (the output topics must exist: the job's preparation
        creates them) in a background thread, or, without ``background``, only when
        :meth:`wait_for` or :meth:`finish` is called."""
        for line in self.plan.banner_lines():
            logger.info("%s", line)
        if background:
            self._thread = threading.Thread(target=self._loop, name="privstream-run-monitor", daemon=True)
            self._thread.start()
        return self

    def wait_for(self, done: Callable[[RunCounts], bool], *, timeout_s: float = 60.0) -> RunCounts:
        """Read in this thread (a monitor started without ``background``) until ``done(counts)``,
        logging progress as the thread would; raises ``TimeoutError`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not done(self.counts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"progress: not done after {timeout_s:g} s: {self.counts.progress_line()}")
            self.poll()
            self._log_progress()
        return self.counts

    def _open(self) -> None:
        from privstream.connectors.consume import committed_reader

        topics = [self.plan.releases_topic, self.plan.dlq_topic]
        if self.plan.ledger_topic:
            topics.append(self.plan.ledger_topic)
        for topic in topics:
            try:
                self._readers.append(committed_reader(self.plan.bootstrap, topic))
            except Exception as exc:  # a monitor never stops the job; say once what it cannot read
                logger.warning("progress: cannot read %s (%s)", topic, exc)

    def poll(self) -> int:
        """Read what arrived on the output topics; returns how many records."""
        if not self._readers:
            self._open()
        read = 0
        for reader in list(self._readers):
            try:
                records = reader.poll(timeout_ms=200)
            except Exception as exc:  # an undecodable record: stop reading that topic, say so
                logger.warning("progress: stopped reading %s (%s)", reader.topic, exc)
                self._readers.remove(reader)
                continue
            with self._lock:
                for record in records:
                    self.counts.add(record.schema, record.value, self.plan.run_id, self.plan.ledger_id)
                new_reasons = [r for r in self.counts.dead_letter_reasons if r not in self._reasons_told]
                self._reasons_told.update(new_reasons)
            for reason in new_reasons:  # one line per kind of bad input (e.g. an earlier run's leftovers)
                logger.warning(
                    "dead-lettering: %s (privstream tail %s --run %s)",
                    reason,
                    self.plan.dlq_topic,
                    self.plan.run_id,
                )
            read += len(records)
        return read

    def _messages_read(self) -> int | None:
        """The messages the job's source emitted, from Flink's REST API (None if unknown)."""
        if not self.plan.web_ui:
            return None
        try:
            with urllib.request.urlopen(f"{self.plan.web_ui}/jobs/overview", timeout=2) as resp:
                jobs = json.load(resp).get("jobs", [])
            wanted = [j for j in jobs if self.plan.flink_job_name in (None, j.get("name"))]
            if not wanted:
                return None
            with urllib.request.urlopen(f"{self.plan.web_ui}/jobs/{wanted[-1]['jid']}", timeout=2) as resp:
                vertices = json.load(resp).get("vertices", [])
        except (OSError, ValueError, KeyError, IndexError):
            return None
        return source_messages(vertices, self.plan.source_table)

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            try:
                self.poll()
                if time.monotonic() - last >= self.interval_s:
                    last = time.monotonic()
                    self._log_progress()
            except Exception as exc:  # never let the monitor take the job down
                if not self._warned:
                    self._warned = True
                    logger.warning("progress: monitor error (%s); the job is not affected", exc)
                self._stop.wait(1.0)

    def _log_progress(self) -> None:
        read = self._messages_read()
        with self._lock:
            if read is not None:
                self.counts.messages_read = read
            snapshot = self.counts.snapshot()
            line = self.counts.progress_line()
        if snapshot != self._logged:
            self._logged = snapshot
            logger.info("%s", line)

    def finish(self, *, idle_s: float = 2.0, timeout_s: float = 60.0) -> RunCounts:
        """Stop the thread, read the topics until nothing arrived for ``idle_s`` (a bounded run has
        committed everything when ``execute`` returns), log the summary, close; returns the counts."""
        self._stop_thread()
        start = last = time.monotonic()
        while time.monotonic() - last < idle_s and time.monotonic() - start < timeout_s:
            if self.poll():
                last = time.monotonic()
        self.close()
        for line in summary_lines(self.plan, self.counts):
            logger.info("%s", line)
        return self.counts

    def interrupted(self) -> str:
        """After Ctrl-C: stop the thread, read what is committed now, close; the one line to print."""
        self._stop_thread()
        try:
            self.poll()
        except Exception as exc:  # the broker may be gone too: say what was read before
            logger.debug("progress: last read after Ctrl-C failed (%s)", exc)
        self.close()
        return interrupted_line(self.plan, self.counts)

    def _stop_thread(self) -> None:
        """Stop the background reader thread and wait for it (idempotent; not from the thread itself)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def close(self) -> None:
        """Stop the thread, then the readers (idempotent)."""
        self._stop_thread()
        for reader in self._readers:
            reader.close()
        self._readers = []


def report_end(monitor: RunMonitor) -> int:
    """After a bounded run's ``execute`` returned: the summary, then the exit status (its reason
    logged as an error, one line)."""
    counts = monitor.finish()
    status, why = exit_status(monitor.plan, counts)
    if why:
        logger.error("%s", why)
    return status


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a reported run; ``str()`` is the one line to print (:func:`interrupted_line`)."""


def execute_reported(env: Any, plan: RunPlan, *, interval_s: float = 10.0) -> int:
    """Run ``env``'s job (``plan.flink_job_name``) with the banner, progress and, once it ends, the
    summary; returns the exit status (:func:`report_end`). Ctrl-C raises :class:`RunInterrupted`
    saying how far the committed releases go; a failure stops the monitor and propagates."""
    monitor = RunMonitor(plan, interval_s=interval_s).start()
    try:
        env.execute(plan.flink_job_name)
    except KeyboardInterrupt:
        raise RunInterrupted(monitor.interrupted()) from None
    except Exception as exc:
        monitor.close()
        if REST_PORT_TAKEN in str(exc) and plan.web_ui:  # the port was free when chosen, then taken
            logger.error(
                "error: Flink's web UI could not listen on %s (the port is taken): run again, or choose "
                "a free port with --flink-conf rest.port=PORT",
                plan.web_ui,
            )
            return 2
        raise
    except BaseException:
        monitor.close()
        raise
    return report_end(monitor)
