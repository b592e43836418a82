"""DPSW-Sketch's checkpoint list and privacy-budget split inside one substream.

Wang, Wang, Chen, "DPSW-Sketch: A Differentially Private Sketch Framework for Frequency Estimation
over Sliding Windows" (KDD 2024; "DPSW" below):

* :func:`checkpoint_list` — Alg. 2 lines 1–4 (Step A): the smooth-histogram rule of
  Braverman–Ostrovsky (DPSW Thm 3.1) applied to the fixed positions 1..W of a substream. ``I[j]`` is
  the length of the j-th prefix and of the j-th suffix of the substream; ``I[1] = W``, ``I[|I|] = 1``,
  strictly decreasing, and neighbours satisfy ``I[k] >= (1 − α)·I[k−1]`` or ``I[k] = I[k−1] − 1``.
* :func:`suffix_starts` — Alg. 2 line 5, ``I'[j] = W − I[j] + 1`` (1-based position where the j-th
  suffix starts).
* :func:`budget_split` — DPSW Lemma 4.1's split: ``ρ_1 = ρ(2q − q²)`` for the whole-substream PCMS
  and ``ρ_j = ρ·q^{j−2}(1 − q)³/2`` for each of the j-th prefix and suffix PCMSs (j >= 2). The paper
  uses one α for both the spacing and the split (q = α); that cannot give its experiments' |I| = 3
  (erratum §6.7 of the implementation notes, docs/sliding-window.md), so the ratio q is a separate
  parameter here.

All budget arithmetic is exact (:class:`~fractions.Fraction`), so the noise of every PCMS is
calibrated to exactly the ρ_j that the total ``ρ·[1 − (1 − q)²·q^{|I|−1}] < ρ`` adds up from.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

from privstream.accounting.budget import exact_value
from privstream.validation import check_int


def unit_fraction(name: str, value: object) -> Fraction:
    """``value`` (a float via its shortest decimal, an int or a Fraction) as an exact rational in
    the open interval (0, 1); ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise ValueError(f"{name}: must be a number in (0, 1), got {type(value).__name__}")
    if isinstance(value, float) and value != value:
        raise ValueError(f"{name}: must be a number in (0, 1), got nan")
    frac = exact_value(value)
    if not 0 < frac < 1:
        raise ValueError(f"{name}: must be a number in (0, 1), got {value}")
    return frac


@lru_cache(maxsize=64)
def _checkpoints(length: int, keep_num: int, keep_den: int) -> tuple[int, ...]:
    checkpoints: list[int] = []
    for i in range(length, 0, -1):  # Alg. 2 line 1: i = W down to 1
        checkpoints.append(i)
        j = 0
        while j < len(checkpoints) - 2:  # "for j = 1 to |I| − 2", |I| re-read after each deletion
            # largest k > j with I[k] >= (1 − α)·I[j] (I decreasing: binary search, exact integers)
            bound = keep_num * checkpoints[j]
            lo, hi = j + 1, len(checkpoints)
            while lo < hi:
                mid = (lo + hi) // 2
                if checkpoints[mid] * keep_den >= bound:
                    lo = mid + 1
                else:
                    hi = mid
            k = lo - 1
            if k > j + 1:  # delete the indices strictly between j and k (none if no such k)
                del checkpoints[j + 1 : k]
            j += 1
    return tuple(checkpoints)


def checkpoint_list(length: int, alpha: float | Fraction) -> tuple[int, ...]:
    """DPSW Alg. 2 lines 1–4 for a substream of ``length`` = W items and smooth factor ``alpha``
    (the paper's text calls it β there; a typo, erratum 4): e.g. W = 100, α = 0.5 →
    (100, 50, 25, 13, 7, 4, 2, 1). ``|I| ≈ log_{1/(1−α)} W + 1``."""
    w = check_int("substream", length, type_error=ValueError)
    keep = 1 - unit_fraction("alpha", alpha)
    return _checkpoints(w, keep.numerator, keep.denominator)


def validate_checkpoints(checkpoints: Sequence[int], length: int) -> tuple[int, ...]:
    """An explicit checkpoint list: ints, strictly decreasing, first ``length`` (= W), last 1."""
    values = tuple(check_int("checkpoints", c, allow_numpy=True, type_error=ValueError) for c in checkpoints)
    if not values or values[0] != length or values[-1] != 1:
        raise ValueError(
            f"checkpoints: must start at the substream length {length} and end at 1, got {values}"
        )
    if any(b >= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"checkpoints: must be strictly decreasing, got {values}")
    return values


def suffix_starts(checkpoints: Sequence[int]) -> tuple[int, ...]:
    """DPSW Alg. 2 line 5: ``I'[j] = W − I[j] + 1``, the 1-based position of the j-th suffix's start
    (the suffix itself is the last ``I[j]`` items of the substream: ``u_j = t_l + I'[j] − 1``,
    erratum 1)."""
    length = checkpoints[0]
    return tuple(length - c + 1 for c in checkpoints)


def budget_split(rho: Fraction, ratio: Fraction, count: int) -> tuple[Fraction, ...]:
    """The per-PCMS budgets ``(ρ_1, ρ_2, …, ρ_|I|)`` of DPSW Lemma 4.1 with split ratio ``q``:
    ``ρ_1 = ρ(2q − q²)`` (the one whole-substream PCMS) and ``ρ_j = ρ·q^{j−2}(1−q)³/2`` for each of
    the two PCMSs (prefix and suffix) at index j >= 2."""
    n = check_int("checkpoints", count, type_error=ValueError)
    q = ratio
    budgets = [rho * (2 * q - q * q)]
    budgets += [rho * q ** (j - 2) * (1 - q) ** 3 / 2 for j in range(2, n + 1)]
    return tuple(budgets)


def substream_total(budgets: Sequence[Fraction]) -> Fraction:
    """ρ spent by one substream: ``ρ_1 + 2·Σ_{j>=2} ρ_j`` (sequential composition, Lemma 4.1)."""
    return budgets[0] + 2 * sum(budgets[1:], Fraction(0))
