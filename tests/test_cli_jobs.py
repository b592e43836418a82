"""``privstream run sliding-window`` and ``privstream run ldp-heavy-hitters`` as a user runs them
(issue 26): each a real Flink MiniCluster in a child process, fed by ``privstream produce`` on the
embedded broker. The job logs its start banner, progress lines that count its committed releases,
and Ctrl-C stops it with exit 130 and one line saying how far its committed releases go, with the
command that reads them; every release names the run. (heavy-hitters: tests/test_dashboard_browser.py;
continual-monitor's run id and metrics: tests/test_flink_continual_monitor.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.flink_fixtures import clean_env, ctrl_c_reaches_the_child
from tests.test_dashboard_browser import CliJob, _committed

pytestmark = [pytest.mark.flink, pytest.mark.kafka]


def _cli(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "privstream.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=clean_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _sliding_window(
    bootstrap: str, topic: Callable[..., str]
) -> tuple[list[str], Callable[[], None], str, int]:
    """2,000 Zipf events (one shard), count windows of w = 1,000 and W = 500: 4 releases."""
    events, releases = topic("events"), topic("window-releases")
    _cli("produce", "--bootstrap", bootstrap, "--topic", events, "--generator", "zipf", "--param", "universe=500",
         "--count", "2000", "--batch", "250", "--no-end-marker", "--quiet")  # fmt: skip
    command = [
        "sliding-window", "--topic", events, "--window", "1000", "--substream", "500", "--epsilon", "1",
        "--delta", "1e-6", "--depth", "3", "--width", "64", "--domain-size", "501", "--gamma", "0.1",
        "--releases-topic", releases, "--ledger-topic", topic("ledger", compacted=True),
        "--ledger-id", f"sliding-window/{releases}",
    ]  # fmt: skip
    return command, lambda: None, releases, 4


def _ldp(bootstrap: str, topic: Callable[..., str]) -> tuple[list[str], Callable[[], None], str, int]:
    """300 CNR reports over d = 1,000 (the Normal generator's domain; the clients read the job's public
    state first), a release every 100: 3."""
    reports, state, releases = topic("reports"), topic("state", compacted=True), topic("ldp-releases")
    deployment = f"d-{releases[-8:]}"
    command = [
        "ldp-heavy-hitters", "--scheme", "cnr", "--epsilon", "2", "--domain", "1000", "--k", "5",
        "--deployment", deployment, "--warm-up-normal", "1000", "--epoch-reports", "100", "--state-every", "50",
        "--reports-topic", reports, "--state-topic", state, "--releases-topic", releases,
    ]  # fmt: skip

    def produce() -> None:  # after the job published its state (before its banner)
        _cli("produce", "--bootstrap", bootstrap, "--ldp", "cnr", "--epsilon", "2", "--k", "5",
             "--deployment", deployment, "--state-topic", state, "--topic", reports,
             "--generator", "normal", "--count", "300", "--quiet")  # fmt: skip

    return command, produce, releases, 3


@pytest.mark.parametrize("job", [_sliding_window, _ldp], ids=["sliding-window", "ldp-heavy-hitters"])
def test_a_job_reports_its_run_and_stops_on_ctrl_c_with_one_line(
    job: Callable[..., Any], kafka_broker: Any, unique_topic: Callable[..., str]
) -> None:
    bootstrap = kafka_broker.bootstrap
    command, produce, releases, count = job(bootstrap, unique_topic)
    with CliJob(
        [*command, "--bootstrap", bootstrap, "--checkpoint-interval", "500ms", "--progress-interval", "1s"]
    ) as job:
        err = job.err
        run_id = job.run_id(command[0])
        err.wait_for("the output line", lambda line: f"releases → {releases}" in line)
        produce()
        published = _committed(bootstrap, releases, count)
        assert {r.value["run_id"] for r in published} == {run_id}
        err.wait_for(
            f"progress with {count} releases",
            lambda line: line.startswith("privstream: progress: ") and f"{count} releases written" in line,
        )
        lines = job.ctrl_c()
    last = published[-1].value
    where = (
        f"epoch {last['epoch']}"
        if "epoch" in last
        else f"the window ending at {last['window_end']} of shard 0"
    )
    assert lines[-1] == (
        f"privstream run: stopped; releases committed up to {where} ({count} releases of run {run_id}) on "
        f"{releases!r} (privstream tail {releases} --run {run_id})"
    ), lines[-30:]


def test_a_taken_web_ui_port_is_one_line(kafka_broker: Any, unique_topic: Callable[..., str]) -> None:
    """Flink's web UI port taken (here on purpose; by chance when another process takes the free
    port the launcher chose before Flink binds it): one line saying so and what to do, exit 2."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        releases = unique_topic("releases")
        done = subprocess.run(
            [sys.executable, "-m", "privstream.cli", "run", "heavy-hitters", "--bootstrap", kafka_broker.bootstrap,
             "--topic", unique_topic("events"), "--epsilon", "1", "--delta", "1e-6", "--k", "8", "--epoch", "100",
             "--releases-topic", releases, "--ledger-topic", unique_topic("ledger", compacted=True),
             "--flink-conf", f"rest.port={port}"],
            capture_output=True, text=True, timeout=300, preexec_fn=ctrl_c_reaches_the_child,
            env=clean_env(PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"),
        )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == (
        f"privstream: error: Flink's web UI could not listen on http://127.0.0.1:{port} (the port is taken): "
        "run again, or choose a free port with --flink-conf rest.port=PORT"
    ), done.stderr[-3000:]
