"""Private release mechanisms for Misra–Gries-type sketches (Lebeda–Tětek; Chan et al.)."""

from privstream.mechanisms.domain_topk import noisy_top_k, noisy_top_k_naive
from privstream.mechanisms.gshm import (
    GSHMParameters,
    calibrate_gshm,
    gshm_delta_continuous,
    gshm_delta_discrete,
    lemma_8_6_parameters,
    smallest_tau_continuous,
    smallest_tau_discrete,
)
from privstream.mechanisms.laplace_threshold import laplace_threshold, laplace_threshold_delta
from privstream.mechanisms.pmg import pmg_half_threshold, pmg_standard_threshold, pmg_threshold
from privstream.mechanisms.release import MECHANISMS, applicable_mechanisms, release, release_partitions
from privstream.mechanisms.release_types import ErrorBound, MechanismNotApplicable, Release

__all__ = [
    "MECHANISMS",
    "ErrorBound",
    "GSHMParameters",
    "MechanismNotApplicable",
    "Release",
    "applicable_mechanisms",
    "calibrate_gshm",
    "gshm_delta_continuous",
    "gshm_delta_discrete",
    "laplace_threshold",
    "laplace_threshold_delta",
    "lemma_8_6_parameters",
    "noisy_top_k",
    "noisy_top_k_naive",
    "pmg_half_threshold",
    "pmg_standard_threshold",
    "pmg_threshold",
    "release",
    "release_partitions",
    "smallest_tau_continuous",
    "smallest_tau_discrete",
]
