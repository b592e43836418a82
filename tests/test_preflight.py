"""The pre-flight utility check (issue 26, point 6), at the config level (no Flink, no broker).

Noise-dominated settings warn, naming the smallest change that fixes them; the settings the docs
recommend for each job (parsed by the job's own command-line parser, so the test follows the
documented commands) do not."""

from __future__ import annotations

import argparse
import logging
import math
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from privstream.jobs.preflight import (
    continual_noise,
    heavy_hitters,
    preflight,
    warn_before_start,
    window_noise,
)

pytestmark = pytest.mark.flink  # the job modules import PyFlink

ROOT = Path(__file__).resolve().parents[1]


def documented(path: str, command: str) -> list[str]:
    """``command``'s options, after asserting that ``path`` documents exactly that command (line
    breaks, continuation backslashes and optional ``[...]`` groups aside)."""
    text = re.sub(r"\\\n|\n|`", " ", (ROOT / path).read_text())
    text = re.sub(r"\s+", " ", text)
    assert command in text, f"{path} no longer shows: {command}"
    args = shlex.split(re.sub(r"\[[^\]]*\]", "", command))
    return args[3:]  # after "privstream run <job>"


def parse(module: Any, args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.configure(parser)
    return parser.parse_args(args)


# ---- the settings the docs recommend do not warn -----------------------------------------


def test_documented_heavy_hitters_does_not_warn() -> None:
    from privstream.jobs import heavy_hitters as job

    args = documented(
        "docs/tutorials/heavy-hitters.md",
        "privstream run heavy-hitters --bootstrap 127.0.0.1:9092 --topic events "
        "--epsilon 1 --delta 1e-6 --k 4096 --epoch 100000 --stop-at-end-markers",
    )
    assert preflight(job.config_from_args(parse(job, args))) == []


@pytest.mark.parametrize("nodes", [1, 4, 16])
def test_documented_continual_monitor_does_not_warn(nodes: int) -> None:
    from privstream.jobs import continual_monitor as job

    args = documented(
        "docs/tutorials/continual-monitor.md",
        "privstream run continual-monitor --topic events --epsilon 1 --lam 0.0625 --theta 0.2 "
        "--window 90 --step 24h --window-items 2500000 --universe 17770",
    )
    assert preflight(job.config_from_args(parse(job, args), nodes)) == []


@pytest.mark.parametrize(
    "command",
    [
        "privstream run sliding-window --topic events --window 1000000 --substream 100000 --alpha 0.5 "
        "--epsilon 1 --delta 1e-10 --depth 3 --width 2000 --domain-size 25600 --gamma 0.01",
        "privstream run sliding-window --topic events --windowing event-time --window 60s --substream 10s "
        "--window-items 600000 --alpha 0.5 --epsilon 1 --delta 1e-10 --domain-size 25600 --gamma 0.01",
    ],
)
def test_documented_sliding_window_does_not_warn(command: str) -> None:
    from privstream.jobs import sliding_window as job

    args = documented("docs/sliding-window.md", command)
    assert preflight(job.config_from_args(parse(job, args), 4)) == []


def test_documented_ldp_heavy_hitters_does_not_warn() -> None:
    from privstream.jobs import ldp_heavy_hitters as job

    args = documented(
        "docs/ldp.md",
        "privstream run ldp-heavy-hitters --scheme cnr --epsilon 1 --domain 1000 --k 20 "
        "--deployment demo --warm-up-normal 10000 --epoch-reports 100000 [--state-every 100]",
    )
    assert preflight(job.config_from_args(parse(job, args))) == []


# ---- noise-dominated settings warn, with the fix ------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 4])
def test_issue_continual_example_warns(nodes: int) -> None:
    """Issue 26: the continual-monitor tutorial's ε, λ, θ and universe with a 5-step window of 1 s steps (100 k events)
    released ~217 noise items per step with counts of 246 k-672 k: PCC's noise (σ ≈ 67 k per node)
    dwarfs the bar (θ − λ)·k·W′ = 0.1375·k·5. The warning names the fixes; the W′ it names is the
    smallest that passes (one less still warns)."""
    from privstream.jobs import continual_monitor as job

    args = "--epsilon 1 --lam 0.0625 --theta 0.2 --window 5 --step 1s --universe 17770".split()
    config = job.config_from_args(parse(job, args), nodes)
    sigma, bar = continual_noise(config.settings)
    assert sigma > 60_000 * math.sqrt(nodes) and bar == pytest.approx(0.1375 * nodes * 5)
    (warning,) = preflight(config)
    assert "continual-monitor" in warning and "noise" in warning
    assert "--window " in warning  # W′ = W: no --window-items given
    assert "--epsilon" not in warning  # ε would have to exceed 100, which no job accepts
    items = int(re.search(r"--window-items (\d+)", warning).group(1))
    fixed = replace(config, settings=replace(config.settings, window_items=items))
    assert preflight(fixed) == []
    still = replace(config, settings=replace(config.settings, window_items=items - 1))
    assert preflight(still) != []


def test_heavy_hitters_small_epochs_warn_with_the_epoch_and_epsilon_that_fix_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ε = 0.1 over 1,000-event count epochs: PMG's bar (T − 1 + 2b, about 900 events) leaves room
    for at most one released item per epoch. Both named fixes pass; a time-epoch job is not judged
    (no declared size)."""
    from datetime import timedelta

    from privstream.jobs.config import HeavyHittersConfig

    config = HeavyHittersConfig(epsilon=0.1, delta=1e-6, k=64, epoch=1000)
    (warning,) = heavy_hitters(config)
    epoch = int(re.search(r"--epoch (\d+)", warning).group(1))
    epsilon = float(re.search(r"--epsilon ([\d.]+)", warning).group(1))
    assert "empty or nearly" in warning and 5_000 < epoch < 20_000 and 0.1 < epsilon < 5
    assert heavy_hitters(replace(config, epoch=epoch)) == []
    assert heavy_hitters(replace(config, epsilon=epsilon)) == []
    assert heavy_hitters(replace(config, epoch=epoch - 1)) != []
    caplog.set_level(logging.INFO, logger="privstream.jobs.preflight")
    assert heavy_hitters(replace(config, epoch=timedelta(seconds=10))) == []
    (notice,) = [r.getMessage() for r in caplog.records if r.name == "privstream.jobs.preflight"]
    assert (
        notice.startswith("pre-flight: time epochs hold no declared number of events")
        and "not judged" in notice
    )
    assert re.search(r"an item needs about [\d.]+ events", notice), notice


def test_sliding_window_noise_matches_the_query_plan() -> None:
    """σ of a DPSW estimate (the RMS over a substream's positions of the summed PCMS variances)
    equals the variance of the PCMSs that :meth:`DPSWSketch.query_plan` really reads."""
    import numpy as np
    from privstream.operators.window_logic import WindowSettings

    from privstream.window.dpsw import DPSWSketch
    from privstream.window.pcms import pcms_variance

    settings = WindowSettings(
        window=1000, substream=300, depth=3, width=50, epsilon=1, delta=1e-10,
        domain_size=100, gamma=0.3, shards=1, alpha=0.5,
    )  # fmt: skip
    p = settings.params
    sketch = DPSWSketch(p, noise=lambda variance, count: np.zeros(count, dtype=np.int64))
    start = (math.ceil(p.window / p.substream) + 3) * p.substream
    sketch.update_batch([0] * start)
    variances = []
    for _ in range(p.substream):
        sketch.update_batch([0])
        rhos = [*p.budgets, *p.budgets[1:]]  # the sketch's tables: prefixes, then suffixes
        variances.append(sum(float(pcms_variance(p.depth, rhos[u.table])) for u in sketch.query_plan()))
    assert window_noise(settings) == pytest.approx(math.sqrt(np.mean(variances)))


def test_sliding_window_short_window_warns() -> None:
    from privstream.jobs import sliding_window as job

    args = (
        "--window 10000 --substream 1000 --alpha 0.5 --epsilon 0.5 --delta 1e-10 --depth 3 --width 2000 "
        "--domain-size 25600 --gamma 0.01"
    ).split()
    config = job.config_from_args(parse(job, args), 1)
    (warning,) = preflight(config)
    window = int(re.search(r"--window (\d+)", warning).group(1))
    assert "sliding-window" in warning and window > 10_000
    assert preflight(replace(config, settings=replace(config.settings, window=window))) == []


def test_ldp_short_epochs_warn() -> None:
    from privstream.jobs import ldp_heavy_hitters as job

    args = "--scheme cnr --epsilon 1 --domain 1000 --k 20 --deployment demo --warm-up-normal 100".split()
    config = job.config_from_args(parse(job, args))  # --epoch-reports 1000, the default
    (warning,) = preflight(config)
    reports = int(re.search(r"--epoch-reports (\d+)", warning).group(1))
    assert "ldp-heavy-hitters" in warning and reports > 1000
    assert preflight(replace(config, settings=replace(config.settings, epoch_reports=reports))) == []


def test_warnings_are_logged_before_start(caplog: pytest.LogCaptureFixture) -> None:
    from privstream.jobs.config import HeavyHittersConfig

    with caplog.at_level(logging.WARNING, logger="privstream.jobs.preflight"):
        warnings = warn_before_start(HeavyHittersConfig(epsilon=0.1, delta=1e-6, k=64, epoch=1000))
    assert warnings and [r.getMessage() for r in caplog.records] == [f"pre-flight: {w}" for w in warnings]
