"""Bloom count tables of PDCH-BF (Chan–Li–Shi–Xu §4.2, Theorem 2): sizing, the public hash family,
insertion of non-negative PMG outputs and the min-rule retrieval.

Statistical tests use fixed seeds, so each one is deterministic; the stated false-failure rate is the
probability that the assertion fails for a *random* seed when the implementation is correct.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privstream.continual.bloom import (
    EXACT_INT_BITS,
    MERSENNE_127,
    BloomHashFamily,
    BloomTable,
    bloom_columns,
    bloom_rows,
    encode_item,
)
from privstream.noise.rng import SeededRandomSource

ALPHA = 1e-4  # false-failure rate of each chi-square test below


def _family(tag: str | int, rows: int, columns: int) -> BloomHashFamily:
    return BloomHashFamily.from_seed(f"test-bloom-{tag}".encode(), rows, columns)


# ---------------------------------------------------------------------------------------- sizing


@pytest.mark.parametrize(
    ("n", "delta0", "expected"),
    [
        (17770, Fraction(1, 10), 13),  # ln(177700) = 12.09
        (1000, Fraction(1, 20), 10),  # ln(20000) = 9.90
        (2, Fraction(1, 2), 2),  # ln 4 = 1.39
        (1, Fraction(1, 2), 1),  # ln 2 = 0.69
        (148, Fraction(999, 1000), 5),  # ln 148.15 = 4.998: just below 5
        (149, Fraction(999, 1000), 6),  # ln 149.15 = 5.005: just above 5
    ],
)
def test_bloom_rows_is_ceil_ln_n_over_delta0(n: int, delta0: Fraction, expected: int) -> None:
    assert bloom_rows(n, delta0) == expected
    assert expected == math.ceil(math.log(n / delta0))


def test_bloom_rows_matches_float_formula_on_a_grid() -> None:
    for n in (3, 50, 1000, 17770, 10**6):
        for d in (Fraction(1, 3), Fraction(1, 100), Fraction(7, 10_000), Fraction(1, 10**9)):
            assert bloom_rows(n, d) == math.ceil(math.log(n) - math.log(d))


@pytest.mark.parametrize(("k", "beta", "expected"), [(1, 1, 3), (100, 36, 9786), (3, 8, 66), (5, 16, 218)])
def test_bloom_columns_is_ceil_e_k_beta(k: int, beta: int, expected: int) -> None:
    assert bloom_columns(k, beta) == expected == math.ceil(math.e * k * beta)


def test_paper_experiment_column_count() -> None:
    """The experiments use Q = ⌈e·3600⌉ = 9786 (§5), i.e. kβ = 3600."""
    assert bloom_columns(1, 3600) == 9786


@pytest.mark.parametrize(
    ("n", "delta0"), [(0, Fraction(1, 2)), (10, Fraction(1)), (10, Fraction(0)), (10, 2)]
)
def test_bloom_rows_rejects_bad_arguments(n: int, delta0: Fraction) -> None:
    with pytest.raises(ValueError):
        bloom_rows(n, delta0)


def test_bloom_columns_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        bloom_columns(0, 5)
    with pytest.raises(ValueError):
        bloom_columns(3, 0)


# ---------------------------------------------------------------------------------- hash family


def test_item_encoding_is_injective_and_below_the_prime() -> None:
    items: list[int | str | bytes] = [0, 1, 2**EXACT_INT_BITS - 1, 2**EXACT_INT_BITS, -1, "1", b"1", "", b""]
    codes = [encode_item(x) for x in items]
    assert len(set(codes)) == len(items)
    assert all(0 <= c < 2 ** (EXACT_INT_BITS + 1) < MERSENNE_127 for c in codes)
    assert encode_item(12345) == 12345
    with pytest.raises(TypeError):
        encode_item(True)
    with pytest.raises(TypeError):
        encode_item(1.5)  # type: ignore[arg-type]


def test_family_is_a_deterministic_function_of_the_public_seed() -> None:
    a = BloomHashFamily.from_seed(b"seed", 6, 101)
    b = BloomHashFamily.from_seed(b"seed", 6, 101)
    c = BloomHashFamily.from_seed(b"seed2", 6, 101)
    assert a == b
    assert a.coefficients != c.coefficients
    assert all(0 <= coef < MERSENNE_127 for pair in a.coefficients for coef in pair)
    assert len({pair for pair in a.coefficients}) == 6  # rows use distinct coefficients
    assert a.indices("apple") == tuple(a.index(p, "apple") for p in range(6))
    assert all(0 <= q < 101 for x in range(500) for q in a.indices(x))


def test_single_row_is_uniform_over_columns() -> None:
    """Chi-square on Q = 37 buckets of 37,000 consecutive integer items, every row of one family.
    False-failure rate ALPHA per row (4 rows: ≤ 4e-4 in all)."""
    q, family = 37, _family("uniform", 4, 37)
    for p in range(4):
        counts = np.bincount([family.index(p, x) for x in range(37_000)], minlength=q)
        assert stats.chisquare(counts).pvalue > ALPHA, (p, counts)


def test_uniformity_check_detects_a_biased_hash() -> None:
    """The chi-square above has power: a hash that is 'mod Q' of a value biased to the low half fails."""
    q = 37
    counts = np.bincount([(x * 7919) % (2 * q) % q if x % 3 else 0 for x in range(37_000)], minlength=q)
    assert stats.chisquare(counts).pvalue < ALPHA


def test_pairwise_independence_over_seeds() -> None:
    """Over 4,000 seeds, (H_0(x), H_0(y)) for a fixed pair x ≠ y is uniform on [Q]² (Q = 6, 36 cells),
    and (H_0(x), H_1(x)) — two rows at one item — is uniform too (row independence). Collision rate
    Pr[H_0(x) = H_0(y)] is within the binomial 1e-4 two-sided band around 1/Q. False-failure rate
    ≤ 3·ALPHA."""
    q, trials = 6, 4000
    x, y = 3, "an item"
    pair, rows = np.zeros(q * q, dtype=np.int64), np.zeros(q * q, dtype=np.int64)
    collisions = 0
    for s in range(trials):
        fam = _family(f"pair-{s}", 2, q)
        hx, hy = fam.indices(x), fam.indices(y)
        pair[hx[0] * q + hy[0]] += 1
        rows[hx[0] * q + hx[1]] += 1
        collisions += hx[0] == hy[0]
    assert stats.chisquare(pair).pvalue > ALPHA
    assert stats.chisquare(rows).pvalue > ALPHA
    lo, hi = stats.binom.interval(1 - ALPHA, trials, 1 / q)
    assert lo <= collisions <= hi


# ----------------------------------------------------------------------------- tables, min-rule


def test_insert_and_min_rule_on_a_single_node() -> None:
    family = _family("single", 5, 50)
    counts = {"a": 7, "b": 0, 3: 12, b"z": 1}
    table = BloomTable.from_counts(family, counts)
    assert table.cells.sum() == 5 * (7 + 12 + 1)  # every non-zero item lands once per row
    for row in table.cells:
        assert int(row.sum()) == 20
    # min-rule never undercounts and is exact for inserted items unless every row collides
    for x in ("a", 3, b"z", "b", "absent"):
        assert table.estimate(x) >= counts.get(x, 0)


def test_insert_refuses_negative_counts_and_from_cells_refuses_negative_cells() -> None:
    family = _family("neg", 3, 10)
    with pytest.raises(ValueError):
        BloomTable.from_counts(family, {"a": -1})
    with pytest.raises(ValueError):
        BloomTable.from_cells(family, -np.ones((3, 10), dtype=np.int64))
    with pytest.raises(ValueError):
        BloomTable.from_cells(family, np.zeros((3, 11), dtype=np.int64))
    full = BloomTable.from_counts(family, {"a": 2**63 - 1})
    with pytest.raises(OverflowError):
        full.insert({"a": 1})


def _trial(seed: int, n: int, k: int, beta: int, rows: int, columns: int) -> bool:
    """One Theorem 2 trial: k nodes, each with β non-zero non-negative counts over a universe of n items;
    True iff the min-rule on the summed table returns Σ_v f̂_v(x) exactly for every x in the universe."""
    pick = SeededRandomSource(f"thm2-inputs-{seed}")
    family = _family(f"thm2-{seed}", rows, columns)
    total = BloomTable(family)
    truth: dict[int, int] = {}
    for _ in range(k):
        support: set[int] = set()
        while len(support) < beta:
            support.add(pick.randbelow(n))
        node = {x: 1 + pick.randbelow(50) for x in sorted(support)}
        total.cells += BloomTable.from_counts(family, node).cells
        for x, c in node.items():
            truth[x] = truth.get(x, 0) + c
    assert int(total.cells.min()) >= 0
    return all(total.estimate(x) == truth.get(x, 0) for x in range(n))


def test_theorem2_exact_recovery_at_designed_load() -> None:
    """n = 300, δ_0 = 1/20 ⇒ P = ⌈ln 6000⌉ = 9; k = 3, β = 8 ⇒ Q = ⌈e·24⌉ = 66. Theorem 2: every trial
    recovers all n sums with probability ≥ 1 − δ_0. Over 150 trials we require ≤ 20 failures; if the
    per-trial failure probability is δ_0 (the worst case allowed) this fails with probability
    Pr[Bin(150, 0.05) > 20] < 1e-4."""
    n, delta0, k, beta = 300, Fraction(1, 20), 3, 8
    rows, columns = bloom_rows(n, delta0), bloom_columns(k, beta)
    assert (rows, columns) == (9, 66)
    trials = 150
    failures = sum(not _trial(s, n, k, beta, rows, columns) for s in range(trials))
    assert stats.binom.sf(20, trials, float(delta0)) < 1e-4
    assert failures <= 20


def test_min_rule_fails_when_q_is_far_too_small() -> None:
    """Same load with Q = 3 instead of 66: some item collides in every row in (nearly) every trial.
    We require ≥ 27 of 30 trials to fail (a rough bound on one trial succeeding: each of the 300 − 24
    items with f = 0 sits in a non-empty cell in a row with probability ≥ 1 − (2/3)^24, so all rows
    collide with probability ≥ (1 − 1e-4)^9, and the trial fails unless every zero item escapes)."""
    n, k, beta, rows = 300, 3, 8, 9
    failures = sum(not _trial(1000 + s, n, k, beta, rows, 3) for s in range(30))
    assert failures >= 27


def test_table_flat_is_row_major() -> None:
    family = _family("flat", 2, 4)
    table = BloomTable.from_cells(family, [[1, 2, 3, 4], [5, 6, 7, 8]])
    assert table.flat().tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert table.estimates([0]) == {0: min(table.cells[p, q] for p, q in enumerate(family.indices(0)))}
