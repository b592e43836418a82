"""Cell pooling for chi-square goodness-of-fit tests of the noise samplers."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def pool_cells(observed: Iterable[float], expected: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """Adjacent cells merged in order until each has an expected count >= 5 (a short last run is
    merged into the last cell); the expected counts are rescaled to the observed total."""
    obs_cells, exp_cells, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(observed, expected, strict=True):
        acc_o += o
        acc_e += e
        if acc_e >= 5:
            obs_cells.append(acc_o)
            exp_cells.append(acc_e)
            acc_o = acc_e = 0.0
    obs_cells[-1] += acc_o
    exp_cells[-1] += acc_e
    obs, exp = np.asarray(obs_cells), np.asarray(exp_cells)
    return obs, exp * obs.sum() / exp.sum()
