"""README's first command, ``privstream quickstart``, end to end (own broker, real Flink job)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.flink_fixtures import clean_env

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]


def test_quickstart_prints_released_heavy_hitters_beside_true_counts() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "privstream.cli", "quickstart", "--events", "40000"],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # the default per-shard release: PMG on each partition's sketch, summed (parallel composition)
    assert "[4/4] release of epoch 0" in out and "mechanism=pmg" in out and "parallel composition" in out
    rows = [line.split() for line in out.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert len(rows) >= 5
    # the most frequent Zipf item is released with a count near its true count: its count is in the
    # thousands, PMG's noise per shard is discrete Laplace of scale 1/ε (ε = 1) and the sketch's own
    # error at k = 1024 is small (measured MAE on the top 15 ≈ 28, docs/eval.md), so 0.2·true is
    # far outside both: false-failure rate far below 1e-9 (the noise is unseeded, as in production)
    item, true, released = rows[0][0], int(rows[0][1].replace(",", "")), rows[0][2]
    assert item == "1" and released != "—" and abs(int(released.replace(",", "")) - true) < 0.2 * true
    # it ends by saying how to see a job's output (README's quickstart says so too)
    assert out.rstrip().splitlines()[-1].strip().startswith("privstream dashboard")
    assert "privstream tail releases" in out and "(run " in out
