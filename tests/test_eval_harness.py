"""privstream.eval.harness, .results and .cli: settings, the study registry, the runner's files."""

from __future__ import annotations

import json
import math

import pytest

from privstream.eval import harness
from privstream.eval.claims import Claim
from privstream.eval.harness import Settings, StudyContext, StudyOutput, register_study, run_study
from privstream.eval.results import PlotSpec, read_table, render_plot, select, summarize, write_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the study registry (built-in studies loaded first), restored after the test."""
    harness.studies()
    monkeypatch.setattr(harness, "_STUDIES", dict(harness._STUDIES))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("ks", (0,), "k:"),
        ("ks", (), "k:"),
        ("epsilons", (-1.0,), "epsilon"),
        ("delta", 2.0, "delta"),
        ("beta", 0.0, "beta"),
        ("reps", 0, "reps"),
        ("top", 0, "top"),
        ("gamma", 1.0, "gamma"),
        ("max_events", 0, "max_events"),
        ("workloads", ("zipf:count",), "workload"),
    ],
)
def test_settings_fail_fast_naming_the_parameter(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings().with_overrides(**{field: value})


def test_overrides() -> None:
    base = Settings(workloads=("zipf",), optional_workloads=("movielens",), params={"a": "1"})
    out = base.with_overrides(ks=[8], params={"b": "2"}, reps=None)
    assert out.ks == (8,) and out.params == {"a": "1", "b": "2"} and out.reps == base.reps
    assert out.optional_workloads == ("movielens",)
    assert base.with_overrides(workloads=["tiny"]).optional_workloads == ()  # explicit: no optional ones
    with pytest.raises(ValueError, match="unknown field"):
        base.with_overrides(kk=[1])


@pytest.mark.usefixtures("scratch_registry")
def test_registry_refuses_duplicates_and_bad_names() -> None:
    assert "lebeda-tetek" in [s.name for s in harness.studies()]
    with pytest.raises(ValueError, match="already registered"):
        register_study("lebeda-tetek", lambda ctx: None, "dup")  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="name"):
        register_study("Bad Name", lambda ctx: None, "x")  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="unknown study 'nosuch'"):
        harness.get_study("nosuch")


def test_context_rng_and_params() -> None:
    ctx = StudyContext("s", Settings(params={"m": "1,2", "bad": "x"}), seed=3)
    assert ctx.rng("a", 1).randbits(64) == ctx.rng("a", 1).randbits(64)
    assert ctx.rng("a", 1).randbits(64) != ctx.rng("a", 2).randbits(64)
    assert StudyContext("s", Settings(), seed=4).rng("a", 1).randbits(64) != ctx.rng("a", 1).randbits(64)
    assert ctx.int_list("m", (5,)) == (1, 2) and ctx.int_list("other", (5,)) == (5,)
    with pytest.raises(ValueError, match="bad"):
        ctx.int_list("bad", (1,))


def test_summarize_select_and_tables(tmp_path) -> None:  # noqa: ANN001
    rows = [
        {"arm": "a", "k": 1, "err": 1.0, "cov": 1.0, "note": "x"},
        {"arm": "a", "k": 1, "err": 3.0, "cov": 0.0, "note": "x"},
        {"arm": "a", "k": 1, "err": float("nan"), "cov": 1.0, "note": "y"},
        {"arm": "b", "k": 2, "err": 5.0, "cov": None, "note": "z"},
    ]
    out = summarize(rows, ("arm", "k"), spread=("err",))
    assert [r["runs"] for r in out] == [3, 1]
    assert out[0]["err"] == 2.0 and out[0]["cov"] == pytest.approx(2 / 3) and "note" not in out[0]
    assert out[0]["err_std"] == pytest.approx(math.sqrt(2)) and out[1]["note"] == "z"
    assert math.isnan(out[1]["cov"])
    assert select(rows, {"arm": "a", "note": ("x", "z")}) == rows[:2]
    paths = write_table(tmp_path, "t", rows)
    assert [p.name for p in paths] == ["t.csv", "t.json"]
    assert read_table(tmp_path / "t.json")[2]["err"] is None  # NaN -> null
    assert (tmp_path / "t.csv").read_text().splitlines()[3] == "a,1,,1.0,y"
    assert (
        render_plot(
            rows, PlotSpec("p", x="k", y="err", series="arm", title="t", where={"arm": "c"}), tmp_path
        )
        is None
    )
    path = render_plot(rows, PlotSpec("p", x="k", y="err", series="arm", title="t", logy=True), tmp_path)
    assert path is not None and path.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="kind"):
        PlotSpec("p", x="k", y="err", series="arm", title="t", kind="pie")


def _toy(ctx: StudyContext) -> StudyOutput:
    """A toy study: one row per (workload, rep) with the workload's length."""
    rows = []
    with ctx.progress(len(ctx.settings.workloads) * ctx.settings.reps, "toy") as bar:
        for w in ctx.workloads():
            for rep in range(ctx.settings.reps):
                rows.append(
                    {"workload": w.name, "rep": rep, "n": w.n, "noise": ctx.rng(w.name, rep).randbelow(100)}
                )
                bar.update()
    claims = [Claim.check("n is positive", "toy", str(rows[0]["n"]), "> 0", rows[0]["n"] > 0)]
    plot = PlotSpec("toy_plot", x="workload", y="n", series="workload", kind="bar", title="toy")
    return StudyOutput(rows, ("workload",), claims, (plot,), {"extra": [{"a": 1}]})


@pytest.mark.usefixtures("scratch_registry")
def test_run_study_writes_every_output(tmp_path) -> None:  # noqa: ANN001
    tiny = Settings(workloads=("tiny:count=500",), reps=2)
    register_study("toy", _toy, "a toy study", defaults=tiny, tiny=tiny)
    run = run_study("toy", out_dir=tmp_path, seed=5, overrides={"reps": 3})
    names = sorted(p.name for p in run.files)
    assert names == sorted(
        [
            "runs.csv",
            "runs.json",
            "summary.csv",
            "summary.json",
            "extra.csv",
            "extra.json",
            "toy_plot.png",
            "claims.csv",
            "claims.md",
            "meta.json",
        ]
    )
    assert len(run.tables["runs"]) == 3 and run.tables["summary"][0]["runs"] == 3
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["seed"] == 5 and meta["settings"]["reps"] == 3 and meta["claims"]["PASS"] == 1
    assert "eval:5:toy" in meta["noise"]
    again = run_study("toy", out_dir=tmp_path / "again", seed=5, overrides={"reps": 3}, plots=False)
    assert again.tables["runs"] == run.tables["runs"]  # seeded noise: reproducible
    assert not any(p.suffix == ".png" for p in again.files)


def test_cli_list_and_bad_parameters(capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # noqa: ANN001
    from privstream.cli import main

    assert main(["eval", "--list"]) == 0
    out = capsys.readouterr().out
    assert "lebeda-tetek" in out and "movielens" in out and "zipf" in out
    assert main(["eval", "lebeda-tetek", "--tiny", "--k", "0", "--out", str(tmp_path)]) == 2
    assert "k: must be an int >= 1" in capsys.readouterr().err
    assert main(["eval", "lebeda-tetek", "--tiny", "--workload", "nosuch", "--out", str(tmp_path)]) == 2
    assert "unknown workload 'nosuch'" in capsys.readouterr().err
    assert main(["eval", "lebeda-tetek", "--tiny", "--param", "design=diagonal", "--out", str(tmp_path)]) == 2
    assert "design" in capsys.readouterr().err
    assert main(["eval"]) == 2
