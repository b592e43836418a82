"""PMG on a *standard* Misra–Gries sketch (Lebeda–Tětek §5.1), discrete noise.

Zero-count keys are removed at once, so up to k stored keys may differ between neighbours (e.g. k
keys of count 1 against an empty sketch after one extra decrement), all on one side: k + 1 samples
(k keys + the shared one) must stay below t', t' = min{m : (k+1)·Pr[Z >= m] <= δ}, threshold
1 + 2t'. Noise, thresholding and the error bound are Alg. 2's (:mod:`privstream.mechanisms.pmg`),
applied to the stored keys. Needs Lemma 2's counter structure (sequential MG, Alg. 1 or standard),
never a merge (§7).
"""

from __future__ import annotations

import math

from privstream.mechanisms.common import check_delta, check_epsilon
from privstream.mechanisms.pmg import (
    log_samples_over_delta,
    pmg_calibration,
    pmg_sample,
    smallest_tail_index,
)
from privstream.mechanisms.registry import (
    SEQUENTIAL_MG,
    Calibration,
    Mechanism,
    PrivacyMap,
    Request,
)
from privstream.sketches import Key
from privstream.validation import check_int


def pmg_standard_threshold(epsilon: float, delta: float, k: int) -> int:
    """Inclusive threshold of discrete PMG on a standard MG sketch (§5.1, k + 1 samples)."""
    eps, dlt = check_epsilon(epsilon), check_delta(delta)
    check_int("k", k, type_error=ValueError)
    guess = math.ceil(log_samples_over_delta(k + 1, eps, dlt) / eps)
    return 1 + 2 * smallest_tail_index(k + 1, eps, dlt, start=guess)


def _calibrate(request: Request) -> Calibration:
    b = request.budget
    return pmg_calibration(request, pmg_standard_threshold(b.epsilon, b.delta, request.k), "key")


def _stored(sketch: object) -> list[tuple[Key, int]]:
    """The stored keys and counts (standard MG keeps no zero-count keys): what §5.1 noises."""
    return list(sketch.counters().items())  # type: ignore[attr-defined]


MECHANISM = Mechanism(
    name="pmg_standard",
    title="Lebeda-Tetek Alg. 2 with the §5.1 threshold",
    structure=SEQUENTIAL_MG,
    calibrate=_calibrate,
    sample=pmg_sample,
    prepare=_stored,
    privacy=PrivacyMap(
        pure=False,
        theorem="Lebeda-Tetek §5.1: Cor. 4 on the common keys, k + 1 tail samples for up to k differing keys",
    ),
)
