"""Private release mechanisms for Misra–Gries-type sketches (Lebeda–Tětek; Chan et al.).

Each mechanism is one module declaring a :class:`Mechanism` (accepted builds, δ/domain needs,
calibration, error bound, sampler, privacy map), registered in :mod:`privstream.mechanisms.builtin`;
:func:`release` runs validate → select → charge → sample over the registry
(:mod:`privstream.mechanisms.registry`)."""

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
from privstream.mechanisms.pmg import pmg_half_threshold, pmg_threshold
from privstream.mechanisms.pmg_standard import pmg_standard_threshold
from privstream.mechanisms.registry import (
    Calibration,
    Mechanism,
    NoGuarantee,
    PrivacyMap,
    Request,
    Structure,
    auto_key,
    get,
    names,
    register,
)
from privstream.mechanisms.release import (
    MECHANISMS,
    applicable_mechanisms,
    release,
    release_disjoint,
    release_partitions,
)
from privstream.mechanisms.release_types import ErrorBound, MechanismNotApplicable, Release

__all__ = [
    "MECHANISMS",
    "Calibration",
    "ErrorBound",
    "GSHMParameters",
    "Mechanism",
    "MechanismNotApplicable",
    "NoGuarantee",
    "PrivacyMap",
    "Release",
    "Request",
    "Structure",
    "applicable_mechanisms",
    "auto_key",
    "calibrate_gshm",
    "gshm_delta_continuous",
    "get",
    "gshm_delta_discrete",
    "laplace_threshold",
    "laplace_threshold_delta",
    "lemma_8_6_parameters",
    "names",
    "noisy_top_k",
    "noisy_top_k_naive",
    "pmg_half_threshold",
    "pmg_standard_threshold",
    "pmg_threshold",
    "register",
    "release",
    "release_disjoint",
    "release_partitions",
    "smallest_tau_continuous",
    "smallest_tau_discrete",
]
