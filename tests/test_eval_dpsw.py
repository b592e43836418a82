"""Study ``dpsw`` (DPSW-Sketch §5): the tiny run's tables and claims, the metrics, the checkpoint
lists of the |I| sweep, and claims that FAIL on bad rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privstream.eval.claims import Status
from privstream.eval.harness import StudyRun, run_study
from privstream.eval.studies import dpsw
from privstream.window import checkpoint_list


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> StudyRun:
    return run_study("dpsw", out_dir=tmp_path_factory.mktemp("dpsw"), tiny=True, plots=False)


def test_tiny_run_has_every_arm_part_and_claim(tiny: StudyRun) -> None:
    runs = tiny.tables["runs"]
    assert {r["arm"] for r in runs if r["part"] == "epsilon"} == {dpsw.DPSW, dpsw.PCC_MG, dpsw.EXACT}
    assert {r["part"] for r in runs} == {"epsilon", "window", "checkpoints"}
    assert sorted(r["window"] for r in runs if r["part"] == "window") == [2000, 4000]
    assert sorted(r["I"] for r in runs if r["part"] == "checkpoints") == [2, 3]
    # the summary (the results page's table) keeps each |I| and each w apart: the page shows the
    # MAE per |I| and per w that docs/eval.md quotes
    summary = tiny.tables["summary"]
    assert sorted(r["I"] for r in summary if r["part"] == "checkpoints") == [2, 3]
    assert sorted(r["window"] for r in summary if r["part"] == "window") == [2000, 4000]
    for r in runs:
        assert 0 <= r["f1_0.005"] <= 1 and r["items_per_s"] > 0 and r["sketch_kb"] > 0
        if r["arm"] == dpsw.DPSW:
            assert r["items_per_s_without_noise"] >= r["items_per_s"]
    exact = next(r for r in runs if r["arm"] == dpsw.EXACT)
    assert exact["mae_high"] == 0 and exact["f1_0.01"] == 1
    assert len(tiny.claims) == 5
    assert {c.status for c in tiny.claims} <= {Status.PASS, Status.FAIL, Status.SKIP}


def test_geometric_checkpoints_match_step_a() -> None:
    assert dpsw.geometric_checkpoints(10_000, 3) == [10_000, 100, 1] == list(checkpoint_list(10_000, 0.99))
    assert dpsw.geometric_checkpoints(100, 2) == [100, 1]
    assert dpsw.geometric_checkpoints(1000, 4) == [1000, 100, 10, 1] == list(checkpoint_list(1000, 0.9))


def test_metrics() -> None:
    assert dpsw.f1(set(), set()) == 1 and dpsw.f1({1}, set()) == 0
    assert dpsw.f1({1, 2}, {2, 3}) == pytest.approx(0.5)
    items = np.array([0] * 150 + [1] * 120 + [2] * 5 + list(range(3, 60)), dtype=np.int64)
    truth = dpsw.Truth(items, len(items), len(items), 60, np.random.default_rng(0))
    assert truth.counts[0] == 150 and truth.heavy[0.01] >= {0, 1, 2}
    assert len(truth.high) == 50 and len(truth.low) == 0  # no item outside the top 50 has f >= 100


def test_claims_fail_on_bad_rows() -> None:
    def row(part: str, arm: str, eps: float, mae: float, mre: float, **extra: object) -> dict:
        return {
            "part": part,
            "workload": "z",
            "arm": arm,
            "epsilon": eps,
            "mae_high": mae,
            "mae_low": mae,
            "mre_high": mre,
            "mre_low": mre,
            **extra,
        }

    runs = [
        row("epsilon", dpsw.DPSW, 1.0, 100, 0.2),
        row("epsilon", dpsw.PCC_MG, 1.0, 200, 0.5),
        row("window", dpsw.DPSW, 1.0, 100, 0.1, window=10),
        row("window", dpsw.DPSW, 1.0, 50, 0.2, window=20),
        row("checkpoints", dpsw.DPSW, 1.0, 100, 0.1, I=2),
        row("checkpoints", dpsw.DPSW, 1.0, 90, 0.1, I=3),
    ]
    claims = dpsw._claims(runs, "z")
    assert [c.status for c in claims] == [Status.FAIL, Status.PASS, Status.FAIL, Status.FAIL, Status.FAIL]
    runs[0]["mre_low"] = runs[1]["mre_low"] = math.nan
    assert dpsw._claims(runs, "z")[1].status is Status.SKIP


def test_bad_study_parameters_name_themselves(tmp_path: object) -> None:
    for key, value in (("scale", "huge"), ("budget_ratio", "2"), ("window", "x")):
        with pytest.raises(ValueError, match=key):
            run_study("dpsw", out_dir=tmp_path, tiny=True, plots=False, overrides={"params": {key: value}})


def test_a_workload_without_a_declared_domain_is_refused() -> None:
    """The domain is never derived from the data's maximum."""
    from privstream.eval.workloads import Workload

    w = Workload("undeclared", np.array([1, 5, 9], dtype=np.int64), None)
    with pytest.raises(ValueError, match="declares no item domain"):
        dpsw._universe(w)
