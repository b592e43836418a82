"""``privstream dashboard`` in a real headless browser (Debian's chromium, driven by Selenium through
Debian's chromedriver) against real records on the embedded broker.

The records are the heavy-hitters job's own: its release step without Flink
(:class:`~privstream.operators.release_logic.EpochReleaser`: charge a real
:class:`~privstream.accounting.PrivacyLedger`, run :func:`privstream.mechanisms.release` on the
shards' merged Misra-Gries sketch, encode the Avro ``Release`` and ``LedgerEntry``), written in
Kafka transactions as the job writes them. The dashboard runs as the ``privstream dashboard``
command in a subprocess; the test checks that the page shows the released items with their counts
and the guarantee, that it updates when a new release is committed after the page loaded, and that
Ctrl-C stops the command with one line. The screenshot docs show (docs/images/dashboard.png) is
rewritten only with ``PRIVSTREAM_UPDATE_SCREENSHOT=1``; otherwise it goes to the test's tmp_path.

Without ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (``apt-get install chromium
chromium-driver``, which .ci/run does) the browser test is skipped with that reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

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
    from privstream.operators.shard_logic import MergedEpoch

    from privstream.sketches import MisraGries, merge_in_order

    shards = []
    for items in EPOCHS[epoch]:
        sketch = MisraGries(16)
        sketch.update_batch(np.array(items, dtype=object))
        shards.append(sketch)
    return MergedEpoch(epoch, merge_in_order(shards).to_bytes(), len(shards))


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
    yields its URL and topics; on exit, Ctrl-C must stop it with exit 0 and no traceback."""
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
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # the command's one start line, printed once it listens
        assert first.startswith("privstream dashboard: http://127.0.0.1:"), (first, process.poll())
        url = first.split()[2]
        yield {"url": url, "releases": releases, "ledger": ledger, "bootstrap": kafka_broker.bootstrap}
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, (process.returncode, out, err)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        assert out.startswith("privstream dashboard: stopped") and out.count("\n") == 1, out  # one line
        assert not err.strip(), err
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


def test_the_dashboard_shows_releases_and_the_ledger_and_updates_live(
    browser: Any, dashboard: dict[str, Any], tmp_path: Path
) -> None:
    from privstream.connectors.avro_codec import decode
    from privstream.operators.epochs import TimeEpochs
    from privstream.operators.release_logic import EpochReleaser, ReleaseConfig
    from privstream.operators.sketch_spec import SketchSpec
    from selenium.webdriver.common.by import By

    config = ReleaseConfig(epsilon=1.0, delta=1e-6, total_epsilon=3.0, total_delta=3e-6, ledger_id=LEDGER_ID)
    releaser = EpochReleaser(config, SketchSpec("mg", 16, release_mode="merged"), TimeEpochs(10_000))
    bootstrap, topic, ledger = dashboard["bootstrap"], dashboard["releases"], dashboard["ledger"]
    key = LEDGER_ID.encode()

    first, first_entry = _epoch_records(releaser, 0)
    _commit(bootstrap, [(topic, None, first), (ledger, key, first_entry)])
    record = decode(first)[1]
    released = {entry["item"]: str(entry["count"]) for entry in record["items"]}
    assert {"apple", "cherry"} <= set(released)

    browser.get(dashboard["url"])
    _wait_for(browser, f"the released items {released}", lambda: _item_rows(browser) == released)
    assert set(_chart_labels(browser)) == set(released)  # one bar per released item
    whiskers = browser.find_elements(By.CSS_SELECTOR, "#releases-chart .errorbar path.yerror")
    assert len(whiskers) == len(released)  # each with its stated error bar
    guarantee = _text(browser, "#guarantee")
    flat = "".join(guarantee.split())
    for shown in ("ε1", "δ1e-6", f"mechanism{record['mechanism']}", f"privacyunit{record['privacy_unit']}"):
        assert shown in flat, (shown, guarantee)
    assert record["neighbour_relation"][:60] in guarantee
    bound = record["error_bound"]
    note = _text(browser, "#bound-note")
    assert f"count − {bound['above']:g}" in note and f"count + {bound['below']:g}" in note, note
    _wait_for(browser, "the ledger's first charge", lambda: "1 / 3" in _text(browser, "#ledger-table"))
    ledger_table = _text(browser, "#ledger-table")
    assert LEDGER_ID in ledger_table and "parallel_epochs" in ledger_table, ledger_table

    # a new release committed after the page loaded: the page picks it up without a reload
    second, second_entry = _epoch_records(releaser, 1)
    _commit(bootstrap, [(topic, None, second), (ledger, key, second_entry)])
    record = decode(second)[1]
    released = {entry["item"]: str(entry["count"]) for entry in record["items"]}
    assert "durian-new" in released and "elderberry-new" in released
    _wait_for(browser, f"the new release {released}", lambda: _item_rows(browser) == released)
    _wait_for(browser, "the new items in the chart", lambda: set(_chart_labels(browser)) == set(released))
    assert "epoch 1" in _text(browser, "#release-label")
    recent = _text(browser, "#recent-table")
    assert "epoch 0" in recent and "epoch 1" in recent
    _wait_for(browser, "the ledger's second charge", lambda: "heavy-hitters/dashboard-test 2" in _text(browser, "#ledger-table"))  # fmt: skip

    shot = SCREENSHOT if os.environ.get("PRIVSTREAM_UPDATE_SCREENSHOT") == "1" else tmp_path / "dashboard.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000

    # a refusal (another ledger, spent by one charge) is shown above the last release
    refused = _refusal()
    _commit(bootstrap, [(topic, None, refused)])
    _wait_for(browser, "the refusal", lambda: "budget exhausted" in _text(browser, "#refused"))
    assert decode(refused)[1]["detail"][:40] in _text(browser, "#refused")
    assert "epoch 1" in _text(browser, "#release-label")  # the chart keeps the last release


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


def test_window_releases_are_shown_with_their_guarantee() -> None:
    """A sliding-window job's ``WindowRelease`` (made by its shard logic) as the page shows it."""
    from privstream.connectors.avro_codec import decode, encode
    from privstream.connectors.dashboard import DashboardState
    from privstream.operators.window_logic import LedgerCharge, WindowSettings, WindowShardLogic

    from privstream.partitioning import partition_for

    settings = WindowSettings(
        window=200, substream=50, depth=3, width=64, epsilon=1.0, delta=1e-6, domain_size=60, gamma=0.1,
        shards=1, checkpoints=(50, 8, 1), budget_ratio=0.5, queries=(0, 1, 2), charge=LedgerCharge("sw/t", 1, "abc"),
        submission_key=bytes(range(32)),
    )  # fmt: skip
    items = np.minimum(np.random.default_rng(4).zipf(1.6, 300) - 1, 59).astype(np.int64)
    assert (partition_for(items, 1) == 0).all()
    logic = WindowShardLogic(settings, 0)
    message = encode(
        "EventBatch", {"events": [{"item": int(i), "user_id": None, "event_time": 1} for i in items]}
    )
    outputs = [value for kind, value in logic.process(message, 0, "events") if kind == "release"]
    assert outputs
    state = DashboardState(keep=2)
    for value in outputs:
        state.add_release(*decode(value))
    snapshot = state.snapshot()
    assert len(snapshot["releases"]) == 2  # the latest two of more
    assert state.snapshot(snapshot["version"]) == {"version": snapshot["version"]}  # nothing new
    latest = snapshot["releases"][-1]
    assert latest["kind"] == "WindowRelease" and [i["item"] for i in latest["items"]] == ["0", "1", "2"]
    assert latest["guarantee"]["epsilon"] == 1.0 and "DPSW-Sketch" in latest["guarantee"]["mechanism"]
