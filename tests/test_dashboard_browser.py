"""``privstream dashboard`` in a real headless browser (Debian's chromium, driven by Selenium through
Debian's chromedriver) against a real job's output on the embedded broker.

The main test runs ``privstream run heavy-hitters`` (a Flink MiniCluster in a child process) and the
dashboard as ``privstream dashboard`` in another: the page shows the job's committed releases with
their counts, error bars and guarantee and its ledger, updates when the job releases a new epoch
after the page loaded, and shows a refusal (the release step's own ``ReleaseRefused`` record); the
job's progress lines count the releases; Ctrl-C stops the job with one line saying how far its
committed releases go, and the dashboard with one line. The screenshot docs show
(docs/images/dashboard.png) is rewritten only with ``PRIVSTREAM_UPDATE_SCREENSHOT=1``; otherwise it
goes to the test's tmp_path. The other tests check how the page shows the other jobs' records
(``WindowRelease``, ``LdpRelease``, each made by its job's own logic) and what the command says
when the broker is unreachable.

Without ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (``apt-get install chromium
chromium-driver``, which .ci/run does) the browser test is skipped with that reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from privstream.operators.metrics import DESCRIPTIONS

from tests.flink_fixtures import clean_env, ctrl_c_reaches_the_child, privstream_metrics, wait_for_metrics

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "images" / "dashboard.png"
LEDGER_ID = "heavy-hitters/dashboard-test"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1600",
)

#: each epoch's two shards (item streams); epoch 1 brings an item the first release does not have
EPOCHS: tuple[tuple[list[str], list[str]], ...] = (
    (
        ["apple"] * 900 + ["banana"] * 500 + [f"rare-{i}" for i in range(60)],
        ["apple"] * 300 + ["cherry"] * 700,
    ),
    (["apple"] * 800 + ["durian-new"] * 650, ["cherry"] * 600 + ["elderberry-new"] * 550),
)


def _merged(epoch: int) -> Any:
    """Epoch ``epoch`` of :data:`EPOCHS` as the job's release step gets it: the two shards'
    Misra-Gries sketches merged in shard order."""
    from privstream.operators.shard_logic import EpochReleaseInput

    from privstream.sketches import MisraGries, merge_in_order

    shards = []
    for items in EPOCHS[epoch]:
        sketch = MisraGries(16)
        sketch.update_batch(np.array(items, dtype=object))
        shards.append(sketch)
    return EpochReleaseInput(epoch, merge_in_order(shards).to_bytes(), len(shards))


def _epoch_records(releaser: Any, epoch: int) -> tuple[bytes, bytes]:
    """The job's ``(Release, LedgerEntry)`` messages for epoch ``epoch`` of :data:`EPOCHS`."""
    release, entry = releaser.release(_merged(epoch))
    assert release is not None and entry is not None
    return release, entry


def _commit(bootstrap: str, messages: list[tuple[str, bytes | None, bytes]]) -> None:
    """Write ``(topic, key, value)`` messages in one committed Kafka transaction (as the job does)."""
    from privstream.connectors.clients import kafka_producer

    producer = kafka_producer(bootstrap, transactional_id=f"dashboard-test-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for topic, key, value in messages:
            producer.send(topic, key=key, value=value)
        producer.commit_transaction()
    finally:
        producer.close()


@pytest.fixture
def dashboard(kafka_broker: Any, unique_topic: Callable[..., str]) -> Iterator[dict[str, Any]]:
    """A ``privstream dashboard`` subprocess on a free port over fresh releases and ledger topics;
    yields its URL and topics; on exit, Ctrl-C must stop it with exit 130, one line and no traceback."""
    releases, ledger = unique_topic("releases"), unique_topic("ledger", compacted=True)
    command = [
        sys.executable, "-m", "privstream.cli", "dashboard", "--bootstrap", kafka_broker.bootstrap,
        "--topic", releases, "--ledger-topic", ledger, "--port", "0",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=ctrl_c_reaches_the_child,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # the command's one start line, printed once it listens
        assert first.startswith("privstream dashboard: http://127.0.0.1:"), (first, process.poll())
        url = first.split()[2]
        yield {"url": url, "releases": releases, "ledger": ledger, "bootstrap": kafka_broker.bootstrap}
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 130, (process.returncode, out, err)  # Ctrl-C: 128 + SIGINT
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        assert out.startswith("privstream dashboard: stopped") and out.count("\n") == 1, out  # one line
        # stderr: only the readers' status changes, one line each
        assert set(err.splitlines()) <= {
            "privstream dashboard: releases: reading (read_committed)",
            "privstream dashboard: ledger: reading (read_committed)",
        }, err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Debian chromium through Debian's chromedriver (Selenium Manager is never asked)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: apt-get install -y chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def _text(driver: Any, selector: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, selector).text)


def _wait_for(driver: Any, what: str, condition: Callable[[], bool], timeout_s: float = 60) -> None:
    """Wait until ``condition()`` holds in the page (WebDriverWait re-checks the DOM)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout_s, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda _: condition(), message=f"the page never showed {what}"
    )


def _item_rows(driver: Any) -> dict[str, str]:
    """The released-items table: item -> noisy count, as the page shows them."""
    from selenium.webdriver.common.by import By

    rows = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, "#items-table tbody tr"):
        cells = [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        rows[cells[0]] = cells[1]
    return rows


def _chart_labels(driver: Any) -> list[str]:
    """The bar chart's x-axis tick labels (plotly's SVG)."""
    from selenium.webdriver.common.by import By

    return [t.text for t in driver.find_elements(By.CSS_SELECTOR, "#releases-chart .xtick text")]


pytestmark = pytest.mark.kafka


def _produce(bootstrap: str, topic: str, seed: int) -> None:
    """2,000 Zipf events in batches of 500 through ``privstream produce`` (one count epoch of the job)."""
    done = subprocess.run(
        [sys.executable, "-m", "privstream.cli", "produce", "--bootstrap", bootstrap, "--topic", topic,
         "--generator", "zipf", "--param", "s=1.5", "--count", "2000", "--batch", "500", "--seed", str(seed),
         "--no-end-marker", "--quiet"],
        capture_output=True, text=True, timeout=120, env=clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


class _Lines:
    """A child's stderr, drained by a thread (a full pipe would block the child) into a list."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: Any) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, what: str, condition: Callable[[str], bool], timeout_s: float = 240) -> str:
        """The first line meeting ``condition`` (waits on new lines, not on time)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = next((line for line in self.lines if condition(line)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                assert left > 0, f"no line with {what}: {self.lines[-30:]}"
                self._changed.wait(timeout=left)

    def join(self) -> list[str]:
        self._thread.join(timeout=30)
        return self.lines


PROMETHEUS_FACTORY = "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"


def _prometheus_jar() -> Path:
    """Flink's Prometheus reporter jar as the apache-flink wheel ships it (README: Prometheus)."""
    import pyflink

    (jar,) = (Path(pyflink.__file__).parent / "plugins" / "metrics-prometheus").glob(
        "flink-metrics-prometheus-*.jar"
    )
    return jar


def _prometheus_metrics(port: int) -> dict[str, float]:
    """The ``privstream`` metrics on a Prometheus reporter's page, summed over subtasks."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        text = page.read().decode()
    totals: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if "_privstream_" in name and not line.startswith("#"):
            metric = name.rsplit("_privstream_", 1)[1]
            totals[metric] = totals.get(metric, 0.0) + float(rest.rsplit(" ", 1)[1])
    return totals


class CliJob:
    """``privstream run ARGS`` in a child process (a real Flink MiniCluster; the venv's bin on PATH,
    SIGINT deliverable), its stderr drained into :attr:`err`; leaving the ``with`` block kills it if
    it still runs. :meth:`ctrl_c` stops it as a user does."""

    def __init__(self, args: list[str], **env: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "privstream.cli", "run", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_the_child,
            env=clean_env(PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", **env),
        )  # fmt: skip
        self.err = _Lines(self.process.stderr)

    def run_id(self, job: str) -> str:
        """The run id its start banner names (waits for the banner)."""
        started = self.err.wait_for(
            "the banner", lambda line: line.startswith(f"privstream: starting {job} (run ")
        )
        return started.split("(run ")[1].rstrip(")")

    def ctrl_c(self) -> list[str]:
        """Ctrl-C: it must exit 130 with no traceback; returns its stderr lines."""
        self.process.send_signal(signal.SIGINT)
        assert self.process.wait(timeout=120) == 130
        lines = self.err.join()
        assert not any("Traceback" in line or "KeyboardInterrupt" in line for line in lines), lines[-30:]
        return lines

    def __enter__(self) -> CliJob:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _committed(bootstrap: str, topic: str, count: int) -> list[Any]:
    """The first ``count`` records on ``topic`` (read_committed; waits for them)."""
    from privstream.connectors.consume import read_topic

    return read_topic(bootstrap, topic, expect=count, idle_s=0.1, timeout_s=240)


@pytest.mark.flink
def test_a_running_job_watched_in_the_dashboard_then_stopped_with_ctrl_c(
    browser: Any, dashboard: dict[str, Any], unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """``privstream run heavy-hitters`` (a real Flink MiniCluster in a child process, unbounded,
    count epochs of 2,000 events) as a user watches it:

    - the dashboard shows the job's first committed release (items and counts as on the topic, one
      bar with its stated error bar each, the guarantee, the error bound) and its ledger charge;
    - events produced after the page loaded make the job release epoch 1: the page updates without a
      reload; a refusal committed to the same topic is shown above the chart;
    - while it runs, the job logs its banner, progress lines counting the releases and the dead
      letter (one malformed message), and that message's reason once;
    - the operators' ``privstream`` metrics count the stream in Flink's REST API (the web UI the
      banner names) and through Flink's Prometheus reporter configured as README says;
    - Ctrl-C stops it with exit 130 and one line: how far its committed releases go, with the
      command that reads them."""
    from privstream.connectors.avro_codec import decode
    from privstream.connectors.clients import free_port
    from selenium.webdriver.common.by import By

    bootstrap, releases, ledger = dashboard["bootstrap"], dashboard["releases"], dashboard["ledger"]
    events, prometheus_port = unique_topic("events"), free_port()
    _commit(bootstrap, [(events, None, b"not an Avro event")])  # dead-lettered with its reason
    _produce(bootstrap, events, seed=1)
    command = [
        "heavy-hitters", "--bootstrap", bootstrap,
        "--topic", events, "--epsilon", "1", "--delta", "1e-6", "--k", "16", "--epoch", "2000",
        "--releases-topic", releases, "--ledger-topic", ledger, "--dlq-topic", f"{events}-dlq",
        "--ledger-id", LEDGER_ID, "--checkpoint-interval", "500ms", "--progress-interval", "1s",
        # the Prometheus reporter as README configures it for a local run (the jar on HADOOP_CLASSPATH)
        "--flink-conf", f"metrics.reporter.prom.factory.class={PROMETHEUS_FACTORY}",
        "--flink-conf", f"metrics.reporter.prom.port={prometheus_port}",
    ]  # fmt: skip
    with CliJob(command, HADOOP_CLASSPATH=str(_prometheus_jar())) as job:
        err = job.err
        run_id = job.run_id("heavy-hitters")
        web_ui = err.wait_for("the web UI", lambda line: "Flink web UI: http://" in line).split(
            "Flink web UI: "
        )[1]
        (first,) = _committed(bootstrap, releases, 1)
        assert first.schema == "Release" and first.value["run_id"] == run_id and first.value["epoch"] == 0
        released = {str(entry["item"]): str(entry["count"]) for entry in first.value["items"]}
        assert released, first.value

        browser.get(dashboard["url"])
        _wait_for(browser, f"the released items {released}", lambda: _item_rows(browser) == released)
        assert set(_chart_labels(browser)) == set(released)  # one bar per released item
        whiskers = browser.find_elements(By.CSS_SELECTOR, "#releases-chart .errorbar path.yerror")
        assert len(whiskers) == len(released)  # each with its stated error bar
        guarantee = _text(browser, "#guarantee")
        flat = "".join(guarantee.split())
        for shown in (
            "ε1",
            "δ1e-6",
            f"mechanism{first.value['mechanism']}",
            f"privacyunit{first.value['privacy_unit']}",
        ):
            assert shown in flat, (shown, guarantee)
        assert first.value["neighbour_relation"][:60] in guarantee
        bound = first.value["error_bound"]
        note = _text(browser, "#bound-note")
        assert f"count − {bound['above']:g}" in note and f"count + {bound['below']:g}" in note, note
        _wait_for(browser, "the ledger's charge", lambda: f"{LEDGER_ID} 1" in _text(browser, "#ledger-table"))

        # epoch 1's events, produced after the page loaded: the page shows the job's new release
        _produce(bootstrap, events, seed=2)
        second = _committed(bootstrap, releases, 2)[1]
        assert second.schema == "Release" and second.value["epoch"] == 1 and second.value["run_id"] == run_id
        released = {str(entry["item"]): str(entry["count"]) for entry in second.value["items"]}
        _wait_for(browser, "the label of epoch 1", lambda: "epoch 1" in _text(browser, "#release-label"))
        assert _item_rows(browser) == released
        recent = _text(browser, "#recent-table")
        assert "epoch 0" in recent and "epoch 1" in recent
        shot = (
            SCREENSHOT
            if os.environ.get("PRIVSTREAM_UPDATE_SCREENSHOT") == "1"
            else tmp_path / "dashboard.png"
        )
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000

        # progress while it runs: both releases counted, from the job's own committed output
        # (9 messages: the malformed one and 2 × 4 batches of 500 events, as Flink's REST API counts them)
        err.wait_for(
            "progress with 9 messages, 2 releases and the dead letter",
            lambda line: (
                line.startswith("privstream: progress: 9 messages read, ")
                and "2 releases written, 1 dead letters" in line
            ),
        )
        told = err.wait_for(
            "the dead letter's reason", lambda line: line.startswith("privstream: dead-lettering: ")
        )
        assert "undecodable" in told and f"privstream tail {events}-dlq --run {run_id}" in told, told

        # a refusal (the release step's own record for another, spent ledger) is shown above the chart
        refused = _refusal()
        _commit(bootstrap, [(releases, None, refused)])
        _wait_for(browser, "the refusal", lambda: "budget exhausted" in _text(browser, "#refused"))
        assert decode(refused)[1]["detail"][:40] in _text(browser, "#refused")
        assert "epoch 1" in _text(browser, "#release-label")  # the chart keeps the last release

        # the operators' metrics, in the web UI's REST API and in Prometheus: every event of both
        # epochs counted, the malformed message dead-lettered, two epochs closed and released, no
        # refusal (a counter never incremented is not reported: 0), ε = 1 spent (parallel epochs)
        expected = {"eventsCounted": 4000, "deadLettered": 1, "epochsClosed": 2, "releases": 2, "refusals": 0,
                    "epsilonSpentMicros": 1_000_000}  # fmt: skip
        shown = wait_for_metrics("the REST API", lambda: privstream_metrics(web_ui), expected)
        assert shown["stateBytes"] > 0 and set(shown) <= set(DESCRIPTIONS)  # fixed names: no data in a name
        wait_for_metrics("Prometheus", lambda: _prometheus_metrics(prometheus_port), expected)

        lines = job.ctrl_c()
    assert lines[-1] == (
        f"privstream run: stopped; releases committed up to epoch 1 (2 releases of run {run_id}) on "
        f"{releases!r} (privstream tail {releases} --run {run_id})"
    ), lines[-30:]


def _refusal() -> bytes:
    """The ``ReleaseRefused`` the job's release step writes when its ledger cannot pay an epoch."""
    from privstream.operators.epochs import TimeEpochs
    from privstream.operators.release_logic import EpochReleaser, ReleaseConfig
    from privstream.operators.sketch_spec import SketchSpec

    config = ReleaseConfig(1.0, 1e-6, total_epsilon=1.0, total_delta=1e-6, ledger_id="heavy-hitters/spent")
    releaser = EpochReleaser(config, SketchSpec("mg", 16, release_mode="merged"), TimeEpochs(10_000))
    _epoch_records(releaser, 0)  # spends the whole budget on epoch 0
    refused, entry = releaser.release(_merged(0))  # epoch 0 again: refused
    assert refused is not None and entry is None
    return refused


def window_releases() -> list[bytes]:
    """A sliding-window job's ``WindowRelease`` messages, made by its shard logic from 300 Zipf items
    in count windows (w = 200, W = 50): one per substream end."""
    from privstream.connectors.avro_codec import encode
    from privstream.operators.window_logic import LedgerCharge, WindowSettings, WindowShardLogic

    settings = WindowSettings(
        window=200, substream=50, depth=3, width=64, epsilon=1.0, delta=1e-6, domain_size=60, gamma=0.1,
        shards=1, checkpoints=(50, 8, 1), budget_ratio=0.5, queries=(0, 1, 2), charge=LedgerCharge("sw/t", 1, "abc"),
        submission_key=bytes(range(32)),
    )  # fmt: skip
    items = np.minimum(np.random.default_rng(4).zipf(1.6, 300) - 1, 59).astype(np.int64)
    message = encode(
        "EventBatch", {"events": [{"item": int(i), "user_id": None, "event_time": 1} for i in items]}
    )
    return [
        value
        for kind, value in WindowShardLogic(settings, 0).process(message, 0, "events")
        if kind == "release"
    ]


def test_window_releases_are_shown_with_their_guarantee() -> None:
    """A sliding-window job's ``WindowRelease`` (made by its shard logic) as the page shows it."""
    from privstream.connectors.avro_codec import decode
    from privstream.connectors.dashboard import DashboardState

    outputs = window_releases()
    assert len(outputs) == 6
    state = DashboardState(keep=2)
    for value in outputs:
        state.add_release(*decode(value))
    snapshot = state.snapshot()
    assert len(snapshot["releases"]) == 2  # the latest two of more
    assert state.snapshot(snapshot["version"]) == {"version": snapshot["version"]}  # nothing new
    latest = snapshot["releases"][-1]
    assert latest["kind"] == "WindowRelease" and [i["item"] for i in latest["items"]] == ["0", "1", "2"]
    assert latest["guarantee"]["epsilon"] == 1.0 and "DPSW-Sketch" in latest["guarantee"]["mechanism"]


def test_ldp_releases_are_shown_with_their_guarantee() -> None:
    """An LDP server's ``LdpRelease`` (made by the ldp-heavy-hitters job's own server logic from
    client-randomised reports) as the page shows it: its estimates, rounded, and the local-DP
    guarantee with the scheme and what the warm-up leaves uncovered."""
    from privstream.connectors.avro_codec import decode
    from privstream.connectors.dashboard import DashboardState
    from privstream.operators.ldp_logic import LdpServerLogic

    from tests.test_ldp_job_logic import _settings, _stream

    outputs: list[tuple[str, bytes]] = []
    _stream(LdpServerLogic(_settings(deployment="dash")), seed=1, n=100, outputs=outputs)
    released = [data for kind, data in outputs if kind == "release"]
    assert len(released) == 2  # one per 50 reports
    state = DashboardState()
    for message in released:
        state.add_release(*decode(message))
    latest = state.snapshot()["releases"][-1]
    record = decode(released[-1])[1]
    assert latest["kind"] == "LdpRelease"
    assert latest["label"] == "dash epoch 2 (100 reports)"  # epochs are numbered from 1
    assert [(i["item"], i["count"]) for i in latest["items"]] == [
        (str(e["item"]), round(e["estimate"])) for e in record["items"]
    ]
    guarantee = latest["guarantee"]
    assert guarantee["epsilon"] == record["epsilon"] and guarantee["delta"] == 0.0
    assert (
        guarantee["mechanism"].startswith("HG-LDP hg-cnr (local DP")
        and "200 public warm-up items" in guarantee["mechanism"]
    )
    assert guarantee["neighbour_relation"] == record["neighbour_relation"] != ""


def test_an_unreachable_broker_is_said_on_the_terminal() -> None:
    """No broker at the address: the command serves the page and says on stderr, once, that it waits
    for the broker; SIGTERM (a service manager's stop) ends it with exit 0."""
    from privstream.connectors.clients import free_port

    process = subprocess.Popen(
        [sys.executable, "-m", "privstream.cli", "dashboard", "--bootstrap", f"127.0.0.1:{free_port()}", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert process.stderr is not None and process.stdout is not None
        assert process.stdout.readline().startswith("privstream dashboard: http://127.0.0.1:")
        line = process.stderr.readline()  # waits on the line, not on time
        assert line.startswith("privstream dashboard: releases: waiting for the broker") or line.startswith(
            "privstream dashboard: ledger: waiting for the broker"
        ), line
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, (out, err)
        assert "Traceback" not in err and out.startswith("privstream dashboard: stopped"), (out, err)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
