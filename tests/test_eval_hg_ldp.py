"""Study ``hg-ldp``: the tiny run's tables, the metrics (paper §6.2, App. A.6), claims that FAIL on bad rows."""

from __future__ import annotations

import numpy as np
import pytest

from privstream.eval import ldp_arms
from privstream.eval.claims import Status
from privstream.eval.harness import StudyRun, run_study
from privstream.eval.studies import hg_ldp


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> StudyRun:
    return run_study("hg-ldp", out_dir=tmp_path_factory.mktemp("hg"), tiny=True, plots=False)


def test_tiny_run_has_every_arm_epsilon_and_memory_row(tiny: StudyRun) -> None:
    runs = tiny.tables["runs"]
    assert {r["arm"] for r in runs} == {*hg_ldp.SCHEMES, *hg_ldp.ORACLES, hg_ldp.HG}
    assert {r["epsilon"] for r in runs} == {1.0, 3.0} and {r["rep"] for r in runs} == {0, 1}
    k = hg_ldp.TINY.ks[0]
    for r in runs:  # Precision is a count of k; the non-private and ε = 3 BDR/CNR arms find the head
        assert r["precision"] * k == round(r["precision"] * k), r
    mean = {
        arm: np.mean([r["ndcg"] for r in runs if r["arm"] == arm and r["epsilon"] == 3.0])
        for arm in (hg_ldp.HG, "bdr", "cnr")
    }
    assert all(value > 0.5 for value in mean.values()), mean
    hg = [r for r in runs if r["arm"] == hg_ldp.HG]
    assert {r["precision"] for r in hg} != {0.0} and max(r["aae"] for r in hg) < 300
    memory = {r["d"]: r for r in tiny.tables["memory"]}
    assert 0.8 < memory[1000]["cnr"] / memory[100_000]["cnr"] < 1.25
    assert 800_000 <= memory[100_000]["grr"] < 900_000
    assert all(r["reports_per_s"] > 0 for r in tiny.tables["timing"])
    statuses = {c.claim.split("(")[0].strip(): c.status for c in tiny.claims}
    assert statuses["server memory depends only on k, while GRR/HR grow linearly in d"] is Status.PASS
    assert statuses["on real data DSR ≈ BGR"] is Status.SKIP


def test_metrics() -> None:
    """Exact list → NDCG = Precision = 1; disjoint → 0; an adjacent swap → NDCG < 1 with
    Precision 1; AAE over the true top-k with f̂ = 0 for a missing item."""
    counts = np.array([50, 40, 30, 20, 10, 0])
    truth = [0, 1, 2]
    exact = [(0, 50.0), (1, 40.0), (2, 30.0)]
    assert ldp_arms.ndcg(exact, truth) == 1 and ldp_arms.precision(exact, truth) == 1
    assert ldp_arms.ndcg([(3, 9.0), (4, 8.0), (5, 7.0)], truth) == 0
    swapped = [(1, 40.0), (0, 50.0), (2, 30.0)]
    assert ldp_arms.ndcg(swapped, truth) < 1 and ldp_arms.precision(swapped, truth) == 1
    assert ldp_arms.aae([(0, 45.0), (1, 40.0), (4, 99.0)], truth, counts) == pytest.approx((5 + 0 + 30) / 3)
    top, c = ldp_arms.true_top(np.array([3, 3, 1, 1, 2], dtype=np.int64), 5, 2)
    assert top == [1, 3] and c[3] == 2


def test_claims_fail_on_bad_rows() -> None:
    """Hand-made rows where CNR is the worst scheme and HG-LDP memory grows with d: FAIL."""
    rows = []
    for arm, value in (
        ("bgr", 0.9),
        ("dsr", 0.8),
        ("bdr", 0.7),
        ("cnr", 0.1),
        ("grr", 0.95),
        ("hr", 0.95),
        ("heavyguardian", 1.0),
    ):
        rows.append(
            {
                "workload": "normal",
                "arm": arm,
                "epsilon": 2.0,
                "rep": 0,
                "ndcg": value,
                "precision": value,
                "aae": 100 * (1 - value),
            }
        )
    memory = [
        {"d": d, "bgr": d, "dsr": 1, "bdr": 1, "cnr": 1, "heavyguardian": 1, "grr": 8 * d, "hr": 8 * d}
        for d in (1000, 41_270)
    ]
    claims = hg_ldp._claims(rows, memory, ["normal"], 2.0)
    assert all(c.status is Status.FAIL for c in claims if c.status is not Status.SKIP)
    assert sum(c.status is Status.FAIL for c in claims) == 7


def test_bad_parameters_fail_fast(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for params, name in (({"scale": "huge"}, "scale"), ({"warmup": "1.5"}, "warmup")):
        with pytest.raises(ValueError, match=name):
            run_study("hg-ldp", out_dir=tmp_path, tiny=True, plots=False, overrides={"params": params})


def test_memory_is_measured_so_growth_in_d_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory is a deep size of the server after a stream (ldp_arms.deep_size): a server that
    kept something of size d would grow with d, and the "flat in d" claim would FAIL; the state
    history counts too."""

    class Leaky(ldp_arms.HgLdpServer):
        def __init__(self, params, **kwargs):  # type: ignore[no-untyped-def]
            super().__init__(params, **kwargs)
            self.leak = bytearray(params.domain_size)

    monkeypatch.setattr(ldp_arms, "HgLdpServer", Leaky)
    memory = [ldp_arms.memory_row(d, 10, reports=300) for d in (1000, 100_000)]
    assert memory[1]["bgr"] > 10 * memory[0]["bgr"]
    claims = hg_ldp._claims([], memory, [], 2.0)
    flat = next(c for c in claims if c.claim.startswith("server memory depends only on k"))
    assert flat.status is Status.FAIL
    monkeypatch.undo()
    params = ldp_arms.HgLdpParams("bgr", 1.0, 100, 4)
    small, large = (ldp_arms.HgLdpServer(params, max_lag=lag) for lag in (0, 1000))
    for server in (small, large):
        server.warm_start({0: 5, 1: 5, 2: 5, 3: 5})
        server.start_statistics()
        for i in range(200):  # 200 versions: the hot set changes every report
            server.history.publish((0, 1, 2, 4 + i % 90), i % 2 == 0)
    assert ldp_arms.deep_size(large) > ldp_arms.deep_size(small) + 200 * 50
