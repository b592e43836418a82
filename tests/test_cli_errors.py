"""Exit codes and one-line messages (issue 26, point 5): bounds on ε/δ no one would mean refused
before Flink starts, naming the option; bad input files reported with file and line; Ctrl-C as one
line and exit 130; PRIVSTREAM_BOOTSTRAP honoured by every command; the jobs' output topics in their
``--help``; ``privstream keys``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from privstream.connectors.broker import EmbeddedBroker
from privstream.jobs.config import HeavyHittersConfig
from privstream.jobs.sliding_window import SlidingWindowConfig
from privstream.operators.continual_logic import ContinualSettings
from privstream.operators.ldp_logic import LdpServerSettings
from privstream.operators.window_logic import WindowSettings

from privstream.cli import build_parser, main
from privstream.validation import check_privacy_bound
from tests.flink_fixtures import ctrl_c_reaches_the_child

HH = {"epsilon": 1.0, "delta": 1e-6, "k": 8, "epoch": timedelta(seconds=10)}
WINDOW = dict(
    window=200, substream=50, depth=3, width=64, epsilon=1.0, delta=1e-6, domain_size=60, gamma=0.1, shards=2
)
CONTINUAL = dict(mode="lu", epsilon=4.0, lam=0.25, window=8, universe=12, nodes=3, theta=0.3, step_ms=1000)
RUN_HH = ["run", "heavy-hitters", "--delta", "1e-6", "--k", "8", "--epoch", "100"]
LDP = dict(scheme="cnr", epsilon=2.0, domain_size=100, k=5, deployment="d", warm_up=(1, 2, 3))


@pytest.mark.parametrize(
    ("build", "option"),
    [
        (lambda: HeavyHittersConfig(**{**HH, "epsilon": 1e308}), "--epsilon"),
        (lambda: HeavyHittersConfig(**HH, total_epsilon=1000.0), "--total-epsilon"),
        (lambda: HeavyHittersConfig(**{**HH, "delta": 0.5}), "--delta"),
        (lambda: HeavyHittersConfig(**HH, total_delta=0.2), "--total-delta"),
        (lambda: WindowSettings(**{**WINDOW, "epsilon": 1e308}), "--epsilon"),  # type: ignore[arg-type]
        (lambda: WindowSettings(**{**WINDOW, "delta": 0.3}), "--delta"),  # type: ignore[arg-type]
        (
            lambda: SlidingWindowConfig(WindowSettings(**WINDOW), bootstrap="h:1", total_epsilon=500.0),
            "--total-epsilon",
        ),  # type: ignore[arg-type]
        (lambda: ContinualSettings(**{**CONTINUAL, "epsilon": 1e308}), "--epsilon"),  # type: ignore[arg-type]
        (lambda: LdpServerSettings(**{**LDP, "epsilon": 101.0}), "--epsilon"),  # type: ignore[arg-type]
        (lambda: LdpServerSettings(**{**LDP, "epsilon": 1e308}), "--epsilon"),  # type: ignore[arg-type]
    ],
)
def test_a_privacy_parameter_no_one_would_mean_is_refused_naming_the_option(build, option: str) -> None:
    with pytest.raises(
        ValueError, match=f"^{option}: . = .* is above (100|0.1), where the guarantee means nothing"
    ):
        build()


def test_the_bounds_themselves() -> None:
    """ε = 100, δ = 0.1 and ρ = 50 pass; just above each fails; a non-number is left to the caller."""
    for parameter, bound in (("epsilon", 100.0), ("delta", 0.1), ("rho", 50.0)):
        check_privacy_bound("--x", bound, parameter)
        with pytest.raises(ValueError, match="^--x: "):
            check_privacy_bound("--x", bound * 1.0001, parameter)
    check_privacy_bound("--x", "text", "epsilon")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "command",
    [
        RUN_HH,
        "run continual-monitor --lam 0.25 --theta 0.3 --window 4 --universe 9".split(),
        "run sliding-window --window 9 --substream 3 --delta 1e-6 --domain-size 9 --gamma 0.5".split(),
        "run ldp-heavy-hitters --domain 9 --deployment d --warm-up-normal 9".split(),
    ],
)
def test_run_refuses_a_huge_epsilon_before_connecting(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Every job: the configuration is checked before the broker (unreachable here) and before
    Flink, with one line naming the option."""
    code = main([*command, "--bootstrap", "127.0.0.1:1", "--epsilon", "1e308"])
    err = capsys.readouterr().err
    assert (
        code == 2 and err.count("\n") == 1 and err.startswith("error: --epsilon: ε = 1e+308 is above 100")
    ), err


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "privstream.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_produce_ldp_refuses_a_huge_epsilon_before_connecting() -> None:
    out = _cli(
        "produce",
        "--bootstrap",
        "127.0.0.1:1",
        "--ldp",
        "grr",
        "--epsilon",
        "1e9",
        "--generator",
        "zipf",
        "--count",
        "10",
    )
    assert out.returncode == 2 and out.stderr.startswith(
        "privstream produce: error: --epsilon: ε = 1e+09 is above 100"
    )


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        (
            "big.csv",
            "item\n1\n" + "x" * 10_000_000 + "\n",
            "line 3: not valid CSV: field larger than field limit",
        ),
        (
            "big.jsonl",
            '{"item": 1}\n' + json.dumps({"item": "x" * 10_000_000}) + "\n",
            "line 2: item has 10,000,000 characters",
        ),
        ("bytes.csv", b"item\n1\n2\nab\xffc\n", "line 4: byte 0xff at column 3 is not UTF-8"),
        ("bytes.jsonl", b'{"item": 1}\n{"item": "\xfe"}\n', "line 2: byte 0xfe at column 11 is not UTF-8"),
        ("bad.jsonl", '{"item": 1}\n{"item": \n', "line 2: not JSON (Expecting value)"),
    ],
)
def test_produce_names_the_file_and_line_of_unreadable_input(
    kafka_broker: EmbeddedBroker,
    unique_topic: Callable[..., str],
    tmp_path: Path,
    name: str,
    content: str | bytes,
    expected: str,
) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = _cli(
        "produce", "--bootstrap", kafka_broker.bootstrap, "--topic", unique_topic(), "--file", str(path)
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"privstream produce: error: --file {path}: {expected}")


def test_produce_reports_a_message_too_large_in_one_line(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """20 items of 100,000 characters in one EventBatch: over the producer's 1 MB request limit."""
    path = tmp_path / "wide.jsonl"
    path.write_text("".join(json.dumps({"item": f"{i}" + "y" * 100_000}) + "\n" for i in range(20)))
    out = _cli(
        "produce",
        "--bootstrap",
        kafka_broker.bootstrap,
        "--topic",
        unique_topic(),
        "--file",
        str(path),
        "--batch",
        "20",
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("privstream produce: error: a message is too large to send") and "--batch" in line


def test_ctrl_c_in_produce_is_one_line_and_exit_130(
    kafka_broker: EmbeddedBroker, unique_topic: Callable[..., str]
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "privstream.cli", "produce", "--bootstrap", kafka_broker.bootstrap, "--topic", unique_topic(),
         "--generator", "zipf", "--count", "1e9", "--rate", "2000", "--chunk", "500"],
        stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_the_child,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        first = process.stderr.readline()  # the first progress line: it is producing
        assert first.startswith("produced "), first
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
        rest = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "Traceback" not in rest and rest.strip().splitlines()[-1] == "privstream produce: stopped"


def test_ctrl_c_in_run_says_where_the_committed_releases_are(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job's run interrupted (what Ctrl-C raises in the main thread): one line naming the
    releases topic, exit 130, no traceback."""
    from privstream.jobs import heavy_hitters

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(heavy_hitters, "run", interrupted)
    code = main([*RUN_HH, "--epsilon", "1", "--releases-topic", "rel-x"])
    assert code == 130
    assert (
        capsys.readouterr().err
        == "privstream run: stopped; releases committed so far are on 'rel-x' (privstream tail rel-x)\n"
    )


@pytest.mark.parametrize(
    "command",
    [
        [*RUN_HH, "--epsilon", "1"],
        "run continual-monitor --epsilon 1 --lam 0.25 --theta 0.3 --window 4 --universe 9".split(),
        "run sliding-window --window 9 --substream 3 --epsilon 1 --delta 1e-6 --domain-size 9 --gamma 0.5".split(),
        "run ldp-heavy-hitters --epsilon 1 --domain 9 --deployment d --warm-up-normal 9".split(),
        ["produce", "--generator", "zipf"],
        ["tail", "releases"],
        ["releases", "heavy-hitters"],
        ["ledger", "show", "x"],
    ],
)
def test_every_command_takes_its_bootstrap_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setenv("PRIVSTREAM_BOOTSTRAP", "broker.example:19092")
    assert build_parser().parse_args(command).bootstrap == "broker.example:19092"
    monkeypatch.delenv("PRIVSTREAM_BOOTSTRAP")
    assert build_parser().parse_args(command).bootstrap == "127.0.0.1:9092"


@pytest.mark.parametrize(
    ("job", "defaults"),
    [
        ("heavy-hitters", ["releases", "ledger", "<topic>-dlq"]),
        ("sliding-window", ["window-releases", "ledger", "<topic>-dlq"]),
        ("continual-monitor", ["continual-releases", "<topic>-updates", "<topic>-dlq"]),
        ("ldp-heavy-hitters", ["ldp-releases", "ldp-state", "<reports-topic>-dlq"]),
    ],
)
def test_every_jobs_help_names_its_output_topics(
    job: str, defaults: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["run", job, "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for default in defaults:
        assert f"default: {default}" in text, default


def test_keys_command_writes_the_pdch_bf_keys(tmp_path: Path) -> None:
    out = _cli("keys", "--nodes", "3", "--out", str(tmp_path / "keys"))
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == [
        "node-0.key",
        "node-1.key",
        "node-2.key",
        "roster.json",
    ]
    old = subprocess.run(
        [sys.executable, "-m", "privstream.jobs.continual_monitor", "keys", "--nodes", "1", "--out", str(tmp_path / "k1")],
        capture_output=True, text=True, timeout=120, env={**os.environ},
    )  # fmt: skip
    assert (
        old.returncode == 2
        and old.stderr.strip() == "privstream keys: error: --nodes: PDCH-BF needs >= 2 nodes, got 1"
    )


def test_every_duration_default_of_the_jobs_is_a_positive_duration() -> None:
    """Each job's duration options, left at their defaults, give positive durations in the job's
    config (the command lines are generated from the configs, so the default is the field's own;
    continual-monitor's ``--step`` once defaulted to a text its parser refused)."""
    from privstream.jobs import continual_monitor, heavy_hitters, ldp_heavy_hitters, sliding_window

    def parsed(command: list[str]) -> argparse.Namespace:
        return build_parser().parse_args(command)

    hh = heavy_hitters.config_from_args(parsed([*RUN_HH, "--epsilon", "1"]))
    cm = continual_monitor.config_from_args(
        parsed("run continual-monitor --epsilon 1 --lam 0.25 --theta 0.3 --window 4 --universe 9".split()), 2
    )
    sw = sliding_window.config_from_args(
        parsed(
            "run sliding-window --window 9 --substream 3 --epsilon 1 --delta 1e-6 --domain-size 9 "
            "--gamma 0.5".split()
        ),
        2,
    )
    ldp = ldp_heavy_hitters.config_from_args(
        parsed("run ldp-heavy-hitters --epsilon 1 --domain 99 --deployment d --warm-up-normal 9".split())
    )
    assert cm.settings.step_ms == 86_400_000  # 1d
    for config in (hh, cm, sw, ldp):
        assert config.checkpoint_interval == timedelta(seconds=2)
    for config in (hh, sw):
        assert config.ledger_timeout == timedelta(seconds=60)
    assert hh.ledger_lease == timedelta(seconds=60)
    assert parsed([*RUN_HH, "--epsilon", "1"]).progress_interval == "10s"
