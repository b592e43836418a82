"""privstream.eval.metrics and .claims: hand-computed metrics, the coverage check, the binomial test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privstream.accounting import Budget
from privstream.eval.claims import (
    Claim,
    Status,
    binomial_upper_quantile,
    claims_markdown,
    coverage_verdict,
    format_claims,
    write_claims,
)
from privstream.eval.metrics import (
    GroundTruth,
    Histogram,
    covers,
    release_metrics,
    sketch_errors,
    sketch_memory,
    sketch_term_value,
)
from privstream.mechanisms import ErrorBound, release
from privstream.noise.rng import SeededRandomSource
from privstream.sketches import MisraGries, PrivacyAwareMisraGries, merge_in_order

ITEMS = np.array([1, 1, 1, 2, 2, 3], dtype=np.int64)


def _bound(below: float, above: float, term: str = "0 (exact counts)") -> ErrorBound:
    return ErrorBound(below=below, above=above, beta=0.05, sketch_term=term, derivation="test")


def test_sketch_term_values() -> None:
    assert sketch_term_value("n/(k+1) (Fact 1)", 100, 9) == 10
    assert sketch_term_value("N/(k+1) (Agarwal et al. merge, N = total stream length)", 55, 10) == 5
    assert sketch_term_value("M/(k+1) (Lemma 8.8 / 8.11)", 30, 2) == 10
    assert sketch_term_value("0 (exact counts)", 30, 1) == 0
    with pytest.raises(ValueError, match="sketch_term"):
        sketch_term_value("log(n) (something else)", 10, 1)
    with pytest.raises(ValueError, match="k:"):
        sketch_term_value("n/(k+1)", 10, 0)


def test_metrics_by_hand() -> None:
    truth = GroundTruth(ITEMS, top=2, gamma=0.3)  # top {1, 2}; heavy: f >= 1.8 -> {1, 2}; low {3}
    assert truth.top_keys.tolist() == [1, 2] and truth.heavy_keys.tolist() == [1, 2]
    assert truth.low_keys.tolist() == [3] and truth.n == 6
    out = release_metrics(truth, [(1, 3), (3, 5)])
    assert out["released"] == 2 and out["false_keys"] == 0
    # released top-2 = {3, 1}: one of two true top items
    assert out["topk_precision"] == 0.5 and out["topk_recall"] == 0.5 and out["topk_f1"] == 0.5
    assert out["hh_precision"] == 0.5 and out["hh_recall"] == 0.5
    assert out["mae_high"] == 1.0 and out["mre_high"] == 0.5  # errors 0 (item 1) and 2 (item 2, f=2)
    assert out["mae_low"] == 4.0 and out["mre_low"] == 4.0  # item 3: 5 vs 1
    assert out["max_error"] == 4.0
    assert "covered" not in out and "max_error_vs_sketch" not in out


def test_false_keys_empty_release_and_reference() -> None:
    truth = GroundTruth(ITEMS, top=2, gamma=0.3)
    out = release_metrics(truth, [(9, 4)], reference=Histogram.from_pairs([(1, 3), (2, 1)]))
    assert out["false_keys"] == 1 and out["max_error"] == 4.0  # item 9: 4 vs 0
    assert out["max_error_vs_sketch"] == 4.0  # item 9 (4 vs 0) > item 1 (0 vs 3 -> 3)
    assert out["mean_noise_released"] == 4.0
    empty = release_metrics(truth, [])
    assert math.isnan(empty["topk_precision"]) and empty["topk_recall"] == 0 and empty["topk_f1"] == 0
    assert empty["max_error"] == 3.0


def test_coverage_checks_both_sides_and_the_sketch_term() -> None:
    truth = GroundTruth(ITEMS, top=2)
    exact = Histogram.from_pairs([(1, 3), (2, 2), (3, 1)])
    assert covers(truth, exact, _bound(1, 1), 0.0)
    assert not covers(truth, Histogram.from_pairs([(1, 5)]), _bound(1, 1), 0.0)  # 5 > 3 + 1
    assert not covers(truth, Histogram.from_pairs([(1, 3)]), _bound(1, 1), 0.0)  # item 2: 0 < 2 - 1
    assert covers(truth, Histogram.from_pairs([(1, 3)]), _bound(1, 1), 1.0)  # with S = 1: 0 >= 2 - 1 - 1
    assert not covers(truth, Histogram.from_pairs([(1, 3), (7, 2)]), _bound(1, 1), 5.0)  # item 7: 2 > 0 + 1
    per_item = covers(
        truth, Histogram.from_pairs([(1, 3)]), _bound(1, 1), lambda keys: (keys == 2).astype(float)
    )
    assert per_item  # S = 1 for item 2 only
    out = release_metrics(truth, [(1, 3), (2, 2)], bound=_bound(1, 1), sketch_term=0.0)
    assert out["covered"] == 1.0 and out["noise_bound"] == 1.0
    with pytest.raises(ValueError, match="sketch_term"):
        release_metrics(truth, [(1, 3)], bound=_bound(1, 1))


def test_pmg_release_is_covered_and_sketch_errors_hold() -> None:
    rng = np.random.default_rng(3)
    items = rng.zipf(1.5, 20_000).astype(np.int64) % 500
    truth = GroundTruth(items)
    sketch = MisraGries(32)
    sketch.update_batch(items)
    errors = sketch_errors(truth, sketch)
    assert errors["sketch_over"] == 0 and errors["sketch_under"] <= errors["sketch_term"] == 20_000 / 33
    assert sketch_memory(sketch) == {"counters": len(sketch.counters()), "bytes": len(sketch.to_bytes())}
    rel = release(sketch, Budget(1.0, 1e-6), mechanism="pmg", rng=SeededRandomSource(1))
    s = sketch_term_value(rel.error_bound.sketch_term, sketch.n, sketch.k)
    out = release_metrics(
        truth,
        rel.items,
        bound=rel.error_bound,
        sketch_term=s,
        reference=Histogram.from_mapping(sketch.counters()),
    )
    assert out["covered"] == 1.0 and out["false_keys"] == 0
    assert out["max_error_vs_sketch"] <= rel.error_bound.noise_error
    # a bound that ignores the sketch term is violated on this skewed stream (the check can fail)
    assert not covers(truth, Histogram.from_pairs(rel.items), rel.error_bound, 0.0)


def test_pamg_and_merged_sketch_errors() -> None:
    pamg = PrivacyAwareMisraGries(4, 2)
    users = [(1, 2), (1, 3), (4, 5), (1, 6), (7, 8), (1, 2)]
    pamg.update_batch(users)
    truth = GroundTruth(np.array([x for u in users for x in u], dtype=np.int64))
    errors = sketch_errors(truth, pamg)
    assert errors["sketch_over"] == 0 and errors["sketch_under"] <= errors["sketch_term"] == 12 / 5
    shards = [MisraGries(3), MisraGries(3)]
    shards[0].update_batch([1, 1, 2, 3, 4])
    shards[1].update_batch([5, 5, 6, 7])
    merged = merge_in_order(shards)
    errors = sketch_errors(GroundTruth(np.array([1, 1, 2, 3, 4, 5, 5, 6, 7], dtype=np.int64)), merged)
    assert errors["sketch_over"] == 0 and errors["sketch_under"] <= 9 / 4


def test_bad_parameters_name_themselves() -> None:
    with pytest.raises(ValueError, match="gamma"):
        GroundTruth(ITEMS, gamma=1.5)
    with pytest.raises(ValueError, match="top"):
        GroundTruth(ITEMS, top=0)
    with pytest.raises(TypeError, match="items"):
        GroundTruth(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="pairs"):
        Histogram.from_pairs([("a", 1)])


@pytest.mark.parametrize(("runs", "p"), [(10, 0.05), (100, 0.05), (1000, 0.05), (300, 0.2), (1, 0.5)])
def test_binomial_quantile_matches_scipy(runs: int, p: float) -> None:
    assert binomial_upper_quantile(runs, p) == int(stats.binom.ppf(0.999, runs, p))


def test_coverage_verdict_fails_when_violations_are_too_frequent() -> None:
    ok, text = coverage_verdict(95, 100, 0.05)
    assert ok and "0.950 of 100 runs" in text
    bad, text = coverage_verdict(80, 100, 0.05)
    assert not bad and "20 violations" in text
    with pytest.raises(ValueError, match="covered"):
        coverage_verdict(11, 10, 0.05)


def test_claims_files(tmp_path) -> None:  # noqa: ANN001
    claims = [
        Claim.check("a | b", "Thm 8", "1.0", ">= 0.95", True),
        Claim.check("c", "§7", "0", "refused", False),
        Claim.skip("d", "§8", "no data"),
    ]
    paths = write_claims(tmp_path, claims)
    assert [p.name for p in paths] == ["claims.csv", "claims.md"]
    lines = (tmp_path / "claims.csv").read_text().splitlines()
    assert lines[0] == "claim,source,measured,expected,status" and len(lines) == 4
    assert lines[2].endswith(",FAIL") and lines[3].endswith(",SKIP")
    md = claims_markdown(claims)
    assert "a \\| b" in md and "**PASS**" in md and md.count("\n") == 5
    text = format_claims(claims)
    assert "[FAIL] 2. c" in text and text.endswith("claims: 1 PASS, 1 FAIL, 1 SKIP")
    assert claims[2].status is Status.SKIP and claims[2].measured.startswith("not measured")
