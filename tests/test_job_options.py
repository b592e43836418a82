"""The jobs' command lines are generated from their typed configs (privstream.options,
privstream.jobs.settings): an option is declared once, on its config field.

Checked here: the generator's rules on a small settings class (required exactly when the field has
no default, an option not given keeps the field's default, repeatable options, switches, exclusive
alternatives, conversions naming the option), and on the four jobs: every option of a job's parser
is a field of its config (plus ``--progress-interval`` of the run report), the shared options are
the same in every job (one help text, one default), and a bad value is refused naming the option.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from privstream.jobs import continual_monitor, heavy_hitters, ldp_heavy_hitters, sliding_window
from privstream.jobs.settings import ConfigError, FlinkSettings, KafkaSettings, LedgerSettings, duration

from privstream.options import Alternative, add_options, declared, from_args, int_list, nested, option

JOBS = {
    "heavy-hitters": (heavy_hitters, heavy_hitters.HeavyHittersConfig),
    "sliding-window": (sliding_window, sliding_window.SlidingWindowConfig),
    "continual-monitor": (continual_monitor, continual_monitor.ContinualConfig),
    "ldp-heavy-hitters": (ldp_heavy_hitters, ldp_heavy_hitters.LdpJobConfig),
}


def _double(text: str, option: str, _args: argparse.Namespace) -> int:
    if not text.isdigit():
        raise ValueError(f"{option}: expected digits, got {text!r}")
    return 2 * int(text)


@dataclass(frozen=True)
class Inner:
    size: int = field(metadata=option("a size", kind=int))
    given: int = 0  # no option: passed to from_args
    items: tuple[int, ...] = field(
        default=(1,),
        metadata=option(
            "items",
            parse=int_list,
            alternatives=(Alternative("--items-twice", "twice N", lambda t, o, a: (int(t),) * 2),),
        ),
    )


@dataclass(frozen=True)
class Example:
    inner: Inner = field(metadata=nested())
    name: str = field(default="x", metadata=option("a name"))
    wait: timedelta = field(default=timedelta(seconds=5), metadata=option("a wait", parse=duration))
    doubled: int = field(default=1, metadata=option("doubled", parse=_double))
    tags: tuple[str, ...] = field(default=(), metadata=option("tags", repeat=True))
    loud: bool = field(default=False, metadata=option("loud", switch=True))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_options(parser, Example)
    return parser.parse_args(list(argv))


def test_an_option_is_required_exactly_when_its_field_has_no_default() -> None:
    with pytest.raises(SystemExit):  # --size missing
        parse("--name", "y")
    assert from_args(Example, parse("--size", "3"), given=7) == Example(Inner(3, 7))


def test_options_not_given_keep_the_fields_defaults_and_given_ones_are_converted() -> None:
    got = from_args(
        Example,
        parse("--size", "3", "--wait", "2m", "--doubled", "21", "--tags", "a", "--tags", "b", "--loud"),
    )
    assert got == Example(Inner(3), wait=timedelta(minutes=2), doubled=42, tags=("a", "b"), loud=True)
    assert from_args(Example, parse("--size", "3", "--items", "4,5")).inner.items == (4, 5)
    assert from_args(Example, parse("--size", "3", "--items-twice", "6")).inner.items == (6, 6)
    with pytest.raises(SystemExit):  # exclusive spellings of one field
        parse("--size", "3", "--items", "4", "--items-twice", "6")


def test_conversion_errors_name_the_option() -> None:
    with pytest.raises(ValueError, match="^--doubled: expected digits"):
        from_args(Example, parse("--size", "3", "--doubled", "x"))
    with pytest.raises(ConfigError, match="^--wait: expected a duration"):
        from_args(Example, parse("--size", "3", "--wait", "soon"))


def test_the_help_shows_each_fields_default() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser, Example)
    text = " ".join(parser.format_help().split())
    assert "a wait (default: 5s)" in text and "a name (default: x)" in text and "loud (default" not in text


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


@pytest.mark.parametrize("job", JOBS)
def test_every_job_file_runs_as_a_script(job: str) -> None:
    """``flink run -py jobs/<job>.py …`` (docs/deploy.md) runs the file as ``__main__``: each job file
    parses its command line there (the sliding-window file printed nothing and submitted nothing)."""
    import subprocess
    import sys
    from pathlib import Path

    module, _ = JOBS[job]
    proc = subprocess.run(
        [sys.executable, str(Path(module.__file__)), "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "--bootstrap" in proc.stdout, proc.stdout + proc.stderr
    # every job but the LDP server (one sequential HeavyGuardian server) scales its shards
    assert ("--parallelism" in proc.stdout) == (job != "ldp-heavy-hitters")


@pytest.mark.parametrize("job", JOBS)
def test_every_option_of_a_job_is_a_field_of_its_config(job: str) -> None:
    module, config = JOBS[job]
    parser = argparse.ArgumentParser()
    module.configure(parser)
    flags = {opt.flag(f.name) for f, opt in declared(config)}
    flags |= {alt.name for _, opt in declared(config) for alt in opt.alternatives}
    assert set(_options(parser)) == flags | {"-h", "--help", "--progress-interval"}


def test_the_shared_options_are_declared_once_for_every_job() -> None:
    """Kafka and Flink settings in all four jobs, the ledger's in the two that charge one: the same
    option, help text and default everywhere."""
    shared = {
        "--bootstrap": KafkaSettings,
        "--checkpoint-interval": FlinkSettings,
        "--bundle-size": FlinkSettings,
        "--flink-conf": FlinkSettings,
        "--restore-from": FlinkSettings,
        "--ledger-timeout": LedgerSettings,
        "--total-epsilon": LedgerSettings,
    }
    for flag, owner in shared.items():
        seen = set()
        for module, config in JOBS.values():
            if not issubclass(config, owner):
                continue
            parser = argparse.ArgumentParser()
            module.configure(parser)
            action = _options(parser)[flag]
            seen.add((action.help, repr(action.default)))
        assert len(seen) == 1, (flag, seen)
    assert all(issubclass(c, KafkaSettings) and issubclass(c, FlinkSettings) for _, c in JOBS.values())
    assert issubclass(JOBS["heavy-hitters"][1], LedgerSettings)
    assert issubclass(JOBS["sliding-window"][1], LedgerSettings)


COMMANDS = {
    "heavy-hitters": ["--epsilon", "1", "--delta", "1e-6", "--k", "8", "--epoch", "100"],
    "sliding-window": "--window 9 --substream 3 --epsilon 1 --delta 1e-6 --domain-size 9 --gamma 0.5".split(),
    "continual-monitor": "--epsilon 1 --lam 0.25 --theta 0.3 --window 4 --universe 9".split(),
    "ldp-heavy-hitters": "--epsilon 1 --domain 99 --deployment d --warm-up-normal 9".split(),
}


def _config(job: str, *extra: str) -> object:
    module, _ = JOBS[job]
    parser = argparse.ArgumentParser()
    module.configure(parser)
    args = parser.parse_args([*COMMANDS[job], *extra])
    return (
        module.config_from_args(args)
        if job in ("heavy-hitters", "ldp-heavy-hitters")
        else module.config_from_args(args, 2)
    )


@pytest.mark.parametrize("job", JOBS)
@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--checkpoint-interval", "soon"], "--checkpoint-interval"),
        (["--checkpoint-interval", "0s"], "--checkpoint-interval"),
        (["--bundle-size", "0"], "--bundle-size"),
        (["--flink-conf", "novalue"], "--flink-conf"),
        (["--bootstrap", "nohost"], "--bootstrap"),
        (["--restart-attempts", "-1"], "--restart-attempts"),
    ],
)
def test_a_bad_shared_option_is_refused_naming_it_in_every_job(
    job: str, extra: list[str], named: str
) -> None:
    with pytest.raises(ValueError, match=f"^{named}: "):
        _config(job, *extra)


@pytest.mark.parametrize("job", ["heavy-hitters", "sliding-window"])
def test_a_bad_ledger_option_is_refused_naming_it(job: str) -> None:
    with pytest.raises(ValueError, match="^--ledger-timeout: "):
        _config(job, "--ledger-timeout", "0s")
    with pytest.raises(ValueError, match="^--ledger-topic: "):
        _config(job, "--ledger-topic", "no spaces")


def test_the_environment_gives_every_job_its_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVSTREAM_BOOTSTRAP", "broker.example:19092")
    for job in JOBS:
        assert _config(job).bootstrap == "broker.example:19092"  # type: ignore[attr-defined]
    assert sliding_window.SlidingWindowConfig(_config("sliding-window").settings).bootstrap == (  # type: ignore[attr-defined]
        "broker.example:19092"
    )


def test_derived_topic_defaults() -> None:
    assert _config("sliding-window", "--topic", "clicks").dlq_topic == "clicks-dlq"  # type: ignore[attr-defined]
    assert _config("sliding-window", "--topic", "clicks").ledger_id == "sliding-window/clicks"  # type: ignore[attr-defined]
    cm = _config("continual-monitor", "--topic", "visits")
    assert (cm.updates_topic, cm.dlq_topic) == ("visits-updates", "visits-dlq")  # type: ignore[attr-defined]
    ldp = _config("ldp-heavy-hitters", "--reports-topic", "r")
    assert ldp.dlq_topic == "r-dlq"  # type: ignore[attr-defined]
    assert _config("heavy-hitters", "--topic", "t").dlq == "t-dlq"  # type: ignore[attr-defined]
