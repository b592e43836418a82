"""Study ``chan`` (Chan–Li–Shi–Xu §5): the tiny run's tables, the metric, the site split, the daily
Bloom decode, and claims that FAIL on bad rows."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from privstream.continual.bloom import BloomHashFamily, BloomTable
from privstream.eval import continual_arms as arms
from privstream.eval.claims import Status
from privstream.eval.continual_arms import DailyBloom, fraction_error
from privstream.eval.harness import StudyRun, run_study
from privstream.eval.site_streams import DAY_MS, ratings_stand_in, split_sites
from privstream.eval.studies import chan

LAM = Fraction(1, 1000)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> StudyRun:
    return run_study("chan", out_dir=tmp_path_factory.mktemp("chan"), tiny=True, plots=False)


def test_tiny_run_has_every_arm_and_part(tiny: StudyRun) -> None:
    runs = tiny.tables["runs"]
    paper = {r["arm"] for r in runs if r["part"] == "paper setup"}
    assert paper == {arms.PDCH_LU, arms.PDCH_BF, arms.PDCH_BF_EXACT, arms.DCH_LU, arms.DCH_BF}
    assert {r["part"] for r in runs} == {"paper setup", "MG calibration", "theory"}
    assert {r["arm"] for r in runs if r["part"] == "theory"} >= {"PDCH-LU", "PDCH-BF", "DCH-LU (noiseless)"}
    for r in runs:
        assert r["items"] >= r["heavy"] - r["released"]
    # the noiseless baseline's window size is exact
    assert all(
        r["window_total_ratio"] == 1 for r in runs if r["arm"] == arms.DCH_LU and r["part"] != "theory"
    )
    comm = {r["arm"]: r for r in tiny.tables["communication"]}
    own = next(r for a, r in comm.items() if "paper's own" in a)
    assert own["bytes_128_per_node_step"] == 8 * 9786 * 128 == 10_020_864
    assert tiny.tables["messages"]
    assert {r["level"] for r in tiny.tables["theory_params"]} == set(range(13))  # λ = 1/1024: ℓ = 12


def test_fraction_error_over_h_and_h_hat() -> None:
    true = np.array([50, 30, 15, 5])
    est = np.array([40, 35, 5, 20])
    row = fraction_error(true, 100, est, 100, theta=0.2, lam=0.05)
    # H = {0, 1}, Ĥ (est ≥ 0.15) = {0, 1, 3}: errors 0.10, 0.05, 0.15
    assert row["items"] == 3 and row["heavy"] == 2 and row["released"] == 3
    assert row["error_mean"] == pytest.approx(0.1) and row["error_max"] == pytest.approx(0.15)
    assert row["error_max_all"] == pytest.approx(0.15)


def test_split_sites_keeps_every_event_of_the_busiest_steps() -> None:
    w = ratings_stand_in(days=12, per_day=50, universe=30, seed=3)
    data = split_sites(w, 4, 5, DAY_MS, seed=1)
    day = (w.times - w.times.min()) // DAY_MS
    counts = np.bincount(day)
    start = int(np.argmax(np.convolve(counts, np.ones(5, dtype=np.int64), mode="valid")))
    assert data.k == 4 and data.steps == 5
    assert sum(int(data.counts(t).sum()) for t in range(5)) == int(counts[start : start + 5].sum())
    for t in range(5):
        assert np.array_equal(
            np.sort(np.concatenate([s[t] for s in data.items])), np.sort(w.items[day == start + t])
        )
    # a user's events all land in one site
    assert split_sites(w, 4, 5, DAY_MS, seed=1).items[2][3].tolist() == data.items[2][3].tolist()


def test_daily_bloom_decode_is_the_min_rule() -> None:
    domain = range(60)
    bloom = DailyBloom(b"seed", 3, 20, domain)
    summed = np.zeros(60, dtype=np.int64)
    summed[[1, 7, 33]] = [5, 2, 9]
    decoded = bloom.decode(4, summed)
    family = BloomHashFamily.from_seed(b"seed" + (4).to_bytes(8, "big"), 3, 20)
    table = BloomTable.from_counts(family, {1: 5, 7: 2, 33: 9})
    assert decoded.tolist() == [table.estimate(x) for x in domain]
    assert decoded[1] >= 5 and decoded[33] >= 9


def _errors(arm: str, means: dict[float, float], sd: float = 1e-5) -> list[dict]:
    return [
        {"workload": "w", "arm": arm, "part": "paper setup", "epsilon": e, "error_mean": m, "error_sd": sd}
        for e, m in means.items()
    ]


def test_claims_fail_on_bad_rows() -> None:
    eps = (1.0, 10.0)
    good = _errors(arms.PDCH_LU, {1.0: 2e-4, 10.0: 1e-4})
    assert chan._error_claim(good, "w", arms.PDCH_LU, LAM, eps).status is Status.PASS
    bad = _errors(arms.PDCH_LU, {1.0: 2e-3, 10.0: 1e-4})
    assert chan._error_claim(bad, "w", arms.PDCH_LU, LAM, eps).status is Status.FAIL
    assert chan._error_claim(good, "w", arms.PDCH_LU, LAM, (1.0, 2.0)).status is Status.SKIP
    base = _errors(arms.DCH_LU, {None: 1e-4})  # type: ignore[dict-item]
    assert chan._noise_effect_claim(good + base, "w", eps).status is Status.PASS
    assert chan._noise_effect_claim(bad + base, "w", eps).status is Status.FAIL
    assert chan._bloom_baseline_claim(_errors(arms.DCH_BF, {None: 0.0}), "w", LAM).status is Status.PASS  # type: ignore[dict-item]
    assert chan._bloom_baseline_claim(_errors(arms.DCH_BF, {None: 5e-4}), "w", LAM).status is Status.FAIL  # type: ignore[dict-item]
    assert (
        chan._monotone_claim(_errors(arms.PDCH_BF, {1.0: 3e-4, 10.0: 1e-4}), "w", eps).status is Status.PASS
    )
    assert (
        chan._monotone_claim(_errors(arms.PDCH_BF, {1.0: 1e-4, 10.0: 3e-4}), "w", eps).status is Status.FAIL
    )

    def comm(mean: float, p99: float) -> list[dict]:
        return [
            {
                "workload": "w",
                "arm": arms.PDCH_LU,
                "epsilon": e,
                "updates_mean": mean,
                "updates_p99": p99,
                "updates_max": 30,
            }
            for e in eps
        ]

    assert [c.status for c in chan._updates_claims(comm(5.2, 18), "w", eps)] == [Status.PASS, Status.PASS]
    assert [c.status for c in chan._updates_claims(comm(40, 90), "w", eps)] == [Status.FAIL, Status.FAIL]
    own = {"workload": "w", "arm": "PDCH-BF, paper's own table (P=8, Q=9786)", "bytes_per_node_step": 626_304}
    assert chan._bytes_claim([{**own, "bytes_128_per_node_step": 10_020_864}], "w").status is Status.PASS
    assert chan._bytes_claim([{**own, "bytes_128_per_node_step": 20_000_000}], "w").status is Status.FAIL
    theory = {"part": "theory", "arm": "DCH-LU (noiseless)", "lam": 0.125, "window": 64}
    assert chan._theory_claims([{**theory, "error_max_all": 0.1}])[0].status is Status.PASS
    assert chan._theory_claims([{**theory, "error_max_all": 0.2}])[0].status is Status.FAIL


def test_tiny_run_claims_that_must_hold(tiny: StudyRun) -> None:
    status = {c.claim: c.status for c in tiny.claims}
    assert status["PDCH-BF: about 10 MB per node per day"] is Status.PASS
    assert status["DCH-LU (theory, noiseless): λ-approximate counts, error <= (10/11)λ"] is Status.PASS
    assert status["DCH-BF (no noise): the Bloom filter adds almost no error"] is Status.PASS
