"""Mutation testing of the privacy-critical modules (issue 23), with mutmut 3.

Not part of the default suite (it is slow). Install the tool with ``pip install -e '.[mutation]'``, then::

    python benchmarks/mutation.py                      # every module, then the report
    python benchmarks/mutation.py noise ledger         # named modules only (others keep their last result)
    python benchmarks/mutation.py --report-only        # rebuild the report from the last runs
    python benchmarks/mutation.py --list               # the modules, their files and their tests

Each module is run in its own workspace ``build/mutation/<module>/`` (never in the working tree):

* the package is laid out as installed (``operators/`` -> ``privstream/operators/`` etc., the
  ``package-dir`` mapping of pyproject.toml), so mutmut's module names match the import names;
* functions mutmut would skip because of a decorator are made mutable in the copy only:
  ``@property`` and ``@lru_cache(...)`` are applied after the ``def`` (``f = property(f)``; the cache
  is keyed by the active mutant as well, so no result computed by the original code is reused, and
  bypassed in mutmut's coverage run, so every test that calls a cached function is run for its
  mutants, not only the first one to fill the cache), and
  the numba ``@njit`` decorators are dropped with ``NUMBA_DISABLE_JIT=1`` set for the tests (numba
  then runs the same Python functions; mutmut cannot trampoline into compiled code);
* only the module's own fast test files run (``-m "not flink and not kafka and not slow"``), one
  worker process by default (``--jobs`` for more, on an otherwise idle machine).

The report (``benchmarks/mutation_report.md`` and ``.json``) counts, per module, killed / survived /
timeout / no-tests mutants and lists every survivor (file:line, function, original and mutated line).
A survivor listed in ``benchmarks/mutation_equivalent.toml`` (matched by file, function and the
original and mutated line text, so it survives line shifts; ``mutated = "*"`` covers every mutation
of that line, used for message text only) counts as an equivalent mutant with its
written reason; the kill rate is (killed + timeout + equivalent) / mutants.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("privstream.mutation")

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "mutation"
EQUIVALENTS = ROOT / "benchmarks" / "mutation_equivalent.toml"
REPORT_MD = ROOT / "benchmarks" / "mutation_report.md"
REPORT_JSON = ROOT / "benchmarks" / "mutation_report.json"

# Source directories outside privstream/ and the package they are installed as (pyproject package-dir).
PACKAGE_DIRS = {
    "operators": "privstream/operators",
    "connectors": "privstream/connectors",
    "jobs": "privstream/jobs",
}
PYTEST_ARGS = ["-p", "no:cacheprovider", "-m", "not flink and not kafka and not slow", "-x", "-q"]
# Statements never mutated: exception and log messages (the condition that raises is mutated; the
# wording of the message is not privacy behaviour) and the workspace's own helper import.
DO_NOT_MUTATE = [
    r"^\s*raise \w+(Error|Exception|NotApplicable)\(",
    r"^\s*(log|logger|_log|LOG)\.(debug|info|warning|error|exception)\(",
    r"_mm_per_mutant",
]
STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    36: "timeout",
    24: "timeout",
}
STATUS.update({-24: "timeout", 152: "timeout", 255: "timeout", 34: "skipped", 37: "killed"})


@dataclass(frozen=True)
class Module:
    """One mutation unit: the files mutated and the fast test files that exercise them."""

    name: str
    sources: tuple[str, ...]
    tests: tuple[str, ...]
    numba: bool = False  # mutate the @njit kernels too (tests run with NUMBA_DISABLE_JIT=1)
    optional_tests: tuple[str, ...] = field(default=())  # used when present (written by other work)
    # Test node ids left out of the mutation run only (slow parametrisations that a faster case of
    # the same test already covers).
    deselect: tuple[str, ...] = field(default=())
    # Functions mutated ("name" or "Class.method"); empty: every function of the sources.
    functions: tuple[str, ...] = field(default=())

    def in_scope(self, function: str) -> bool:
        return not self.functions or function in self.functions

    def globs(self) -> list[str]:
        """mutmut's mutant-name patterns of :attr:`functions`."""
        out = []
        for f in self.functions:
            cls, _, name = f.rpartition(".")
            out.append(f"*.xǁ{cls}ǁ{name}__mutmut_*" if cls else f"*.x_{name}__mutmut_*")
        return out


# Pure formatting/rendering code is left out: release_types.py (ErrorBound/Release records and their
# text), registry.py's theorem strings and statements (its privacy maps and refusals are the
# registry unit), eval/ and the CLI. The heavy-guardian server/state (aggregation, not
# randomisation) and the bloom/PDCH variants are not in the brief's list.
MODULES: tuple[Module, ...] = (
    Module(
        "routing",
        ("operators/routing.py", "privstream/partitioning.py"),
        ("tests/test_window_job_logic.py", "tests/test_flink_operator_logic.py"),
        optional_tests=("tests/test_mutation_kills_routing.py",),
    ),
    Module(
        "gshm",
        ("privstream/mechanisms/gshm.py", "privstream/mechanisms/common.py"),
        (
            "tests/test_mechanisms_calibration.py",
            "tests/test_gshm_oracle.py",
            "tests/test_mechanisms_release.py",
        ),
        optional_tests=("tests/test_noise_parameters_recorded.py", "tests/test_mutation_kills_gshm.py"),
        deselect=(
            "tests/test_gshm_oracle.py::test_calibration_against_independent_oracle[2.0-1e-06-1000]",
            "tests/test_gshm_oracle.py::test_calibration_against_independent_oracle[1.0-1e-09-1000]",
            "tests/test_gshm_oracle.py::test_calibration_against_independent_oracle[2.0-1e-09-1000]",
            "tests/test_gshm_oracle.py::test_calibration_against_independent_oracle[0.5-1e-06-1000]",
            "tests/test_gshm_oracle.py::test_sum_of_discrete_gaussians_is_discrete_gaussian[23.61-64]",
            "tests/test_mechanisms_release.py::test_pmg_refused_on_merged_and_standard_sketches",
        ),
        # Not: gshm_delta_continuous / smallest_tau_continuous / gaussian_profile / _phi /
        # lemma_8_6_parameters (the paper's continuous condition, exposed for comparison only, never
        # used by a release) and gshm_error_bound (the stated utility interval).
        functions=(
            "zcdp_profile",
            "_condition",
            "gshm_delta_discrete",
            "smallest_tau_discrete",
            "_log_p",
            "_tau_top",
            "gshm_feasible",
            "GSHMParameters.threshold",
            "GSHMParameters.objective",
            "calibrate_gshm",
            "gshm_release",
            "_calibrate",
            "_sample",
            "check_epsilon",
            "check_delta",
            "laplace_scale",
            "add_laplace",
            "add_gaussian",
            "threshold_and_sort",
        ),
    ),
    Module(
        "pmg",
        ("privstream/mechanisms/pmg.py", "privstream/mechanisms/pmg_standard.py"),
        (
            "tests/test_mechanisms_release.py",
            "tests/test_mechanisms_pmg_zero_slots.py",
            "tests/test_mechanisms_calibration.py",
        ),
        optional_tests=("tests/test_noise_parameters_recorded.py", "tests/test_mutation_kills_pmg.py"),
        functions=(
            "smallest_tail_index",
            "log_samples_over_delta",
            "pmg_half_threshold",
            "pmg_threshold",
            "pmg_release",
            "_zero_slots_over",
            "pmg_calibration",
            "_calibrate",
            "_slots",
            "pmg_sample",
            "pmg_standard_threshold",
            "_stored",
        ),
    ),
    Module(
        "thresholds",
        ("privstream/mechanisms/laplace_threshold.py", "privstream/mechanisms/exact_threshold.py"),
        (
            "tests/test_mechanisms_exact_threshold.py",
            "tests/test_mechanisms_release.py",
            "tests/test_mechanisms_calibration.py",
        ),
        optional_tests=("tests/test_noise_parameters_recorded.py", "tests/test_mutation_kills_thresholds.py"),
        functions=(
            "new_key_factor",
            "laplace_threshold_delta",
            "laplace_threshold",
            "laplace_threshold_release",
            "exact_threshold",
            "_calibrate",
            "_sample",
        ),
    ),
    Module(
        "pcc",
        ("privstream/continual/pcc.py",),
        ("tests/test_continual_pcc.py",),
        optional_tests=("tests/test_keyed_noise_independence.py", "tests/test_mutation_kills_pcc.py"),
        # The noise path: the per-block PMG release, its keyed source and what is summed into the
        # estimates, and from_bytes (a restored PCC must draw from the same keyed source). Not:
        # to_bytes, memory/reporting accessors. blocks.py (the per-level ε_i, β_i and the block
        # boundaries) is its own unit, blocks.
        functions=(
            "pmg_release",
            "PCC.__init__",
            "PCC.step_items",
            "PCC._collect",
            "PCC._release",
            "PCC._block_rng",
            "PCC.from_bytes",
            "PCC.estimates",
            "stored_at",
            "heavy_hitter_bar",
        ),
    ),
    Module(
        "ldp",
        (
            "privstream/ldp/grr.py",
            "privstream/ldp/hg_clients.py",
            "privstream/ldp/olh.py",
            "privstream/ldp/hadamard.py",
            "privstream/ldp/hg_params.py",
            "privstream/ldp/int_domain.py",
            "privstream/ldp/randomiser.py",
        ),
        ("tests/test_ldp_grr.py", "tests/test_ldp_hg_randomisers.py", "tests/test_ldp_oracles.py"),
        optional_tests=(
            "tests/test_keyed_noise_independence.py",
            "tests/test_mutation_kills_ldp.py",
            "tests/test_ldp_batches.py",  # the vectorised randomisers
        ),
        # The client-side randomisers (what leaves the user), the HG-LDP parameters they are built
        # from (the ε₁/ε₂ split, each branch's exact p and q) and OLH's and HR's shared base (the
        # private-value check, the inner exact GRR: its size, ratio and random source). Not: the aggregators and estimators
        # (server-side post-processing of the reports: eq2_*, grr_shrunk and m3, which debias), the
        # variance formulas, and what is stated (effective_epsilon, public).
        functions=(
            "rational_exp_lower",
            "_ratio",
            "_grr",
            "_as_rational",
            "HgLdpParams.__post_init__",
            "HgLdpParams.ratio_epsilon",
            "HgLdpParams.ratio1_epsilon",
            "HgLdpParams.ratio2_epsilon",
            "HgLdpParams.grr_full",
            "HgLdpParams.m1",
            "HgLdpParams.m2",
            "GeneralizedRandomizedResponse.__init__",
            "GeneralizedRandomizedResponse.p",
            "GeneralizedRandomizedResponse.q",
            "GeneralizedRandomizedResponse.index_of",
            "GeneralizedRandomizedResponse.randomise_index",
            "GeneralizedRandomizedResponse.encode",
            "GeneralizedRandomizedResponse.randomise_indices",
            "GeneralizedRandomizedResponse.indices_of",
            "GeneralizedRandomizedResponse.encode_many",
            "int_indices",
            "pack_outputs",
            "LocalRandomiser.encode_many",
            "cold_rank",
            "cold_item",
            "HgLdpClient.__init__",
            "HgLdpClient.effective_epsilon",
            "HgLdpClient._grr",
            "HgLdpClient.encode",
            "HgLdpClient.encode_many",
            "cold_items",
            "hot_positions",
            "BgrClient.randomise_indices",
            "DsrClient.randomise_indices",
            "_SplitClient.randomise_indices",
            "BgrClient.__init__",
            "BgrClient.randomise",
            "DsrClient.__init__",
            "DsrClient.branch",
            "DsrClient._shrunk_input",
            "DsrClient.randomise",
            "_SplitClient.__init__",
            "_SplitClient.m1",
            "_SplitClient.m2",
            "_SplitClient.m3",
            "_SplitClient.randomise",
            "BdrClient.branch",
            "CnrClient.branch",
            "make_client",
            "OptimisedLocalHashing.__init__",
            "OptimisedLocalHashing.p",
            "OptimisedLocalHashing.randomise",
            "OptimisedLocalHashing.encode",
            "HadamardResponse.__init__",
            "HadamardResponse.randomise",
            "HadamardResponse.encode",
            "check_value",
            "IntDomainOracle.__init__",
            "IntDomainOracle.ratio",
        ),
    ),
    Module(
        "noise",
        (
            "privstream/noise/bernoulli.py",
            "privstream/noise/discrete.py",
            "privstream/noise/vectorised.py",
            "privstream/noise/rng.py",
            "privstream/noise/distributions.py",
        ),
        ("tests/test_noise_samplers.py", "tests/test_noise_vectorised.py"),
        optional_tests=(
            "tests/test_mutation_kills_noise.py",
            "tests/test_mutation_kills_distributions.py",
            "tests/test_mechanisms_calibration.py",  # the tails and searches behind every threshold
            "tests/test_mechanisms_exact_threshold.py",
        ),
        # The samplers and their random sources, and distributions.py's tails and searches (they set
        # GSHM's tau and the PMG / Laplace / exact thresholds, and the noise bounds). Not: Limits
        # (resource caps).
        functions=(
            "_alpha",
            "discrete_laplace_pmf",
            "discrete_laplace_tail",
            "discrete_laplace_abs_tail",
            "_gaussian_table",
            "discrete_gaussian_pmf",
            "discrete_gaussian_tail",
            "discrete_gaussian_abs_tail",
            "smallest_satisfying",
            "smallest_abs_bound",
            "as_fraction",
            "_bernoulli_rational",
            "_bernoulli_exp_unit",
            "_bernoulli_exp_minus_one",
            "_bernoulli_exp",
            "bernoulli",
            "bernoulli_exp",
            "positive_rational",
            "_discrete_laplace",
            "_discrete_gaussian",
            "discrete_laplace",
            "discrete_gaussian",
            "_scalar_array",
            "_laplace_array",
            "_gaussian_array",
            "discrete_laplace_array",
            "discrete_gaussian_array",
            "fast_path",
            "_Draws.words",
            "_Draws._valid_words",
            "_Draws.below",
            "_Draws.bernoulli",
            "_Draws.bits",
            "_Draws.top_bits",
            "_Draws.bernoulli_exp_ratio",
            "_Draws.bernoulli_exp_minus_one",
            "_Draws.geometric",
            "_laplace_candidates",
            "_GammaTable.__init__",
            "_GammaTable.gamma",
            "_GammaTable.lookup",
            "_scale_t",
            "_accept",
            "_bernoulli_exp_frac",
            "laplace_array",
            "gaussian_array",
            "uniform_below",
            "CryptoRandomSource.randbits",
            "CryptoRandomSource.randbelow",
            "SeededRandomSource.__init__",
            "SeededRandomSource._take",
            "SeededRandomSource.randbits",
            "SeededRandomSource.randbelow",
            "KeyedRandomSource.__init__",
            "new_noise_key",
            "default_source",
            "resolve",
        ),
    ),
    Module(
        "ledger",
        ("privstream/accounting/ledger.py", "privstream/accounting/budget.py"),
        ("tests/test_accounting_ledger.py", "tests/test_accounting_budget.py"),
        optional_tests=("tests/test_ledger_partition.py", "tests/test_mutation_kills_ledger.py"),
        # What decides spend and refusal, and what keeps a stored ledger from forgetting spend (the
        # chain checks). Not: display (__repr__, _text), accessors, the JSON body layout.
        functions=(
            "parallel_epochs",
            "is_parallel",
            "valid_composition",
            "_add",
            "_max",
            "_amounts",
            "_budget_of",
            "_same_kind",
            "_log_inv_delta",
            "ZCDPBudget.exact",
            "RunningTotals.spent",
            "RunningTotals.after",
            "RunningTotals.covers",
            "RunningTotals.from_dict",
            "genesis_hash",
            "LedgerEntry.create",
            "LedgerEntry.from_dict",
            "PrivacyLedger.__init__",
            "PrivacyLedger.spent",
            "PrivacyLedger.remaining",
            "PrivacyLedger._over",
            "PrivacyLedger._next_entry",
            "PrivacyLedger.can_charge",
            "PrivacyLedger.charge",
            "PrivacyLedger.apply",
            "PrivacyLedger._check_identity",
            "PrivacyLedger.from_entry",
            "PrivacyLedger.from_json",
            "_load",
            "_migrate",
            "_check_same_ledger",
            "most_advanced",
            "exact_value",
            "_check_real",
            "Budget.__post_init__",
            "Budget.exact",
            "ZCDPBudget.__post_init__",
            "budget_from_dict",
            "zcdp_to_dp",
            "dp_to_zcdp",
            "pure_dp_to_zcdp",
            "_exact_sum",
            "compose_sequential",
            "compose_parallel",
        ),
    ),
    Module(
        "keys",
        (
            "operators/release_logic.py",
            "operators/window_logic.py",
            "operators/ldp_logic.py",
            "operators/continual_logic.py",
        ),
        (
            "tests/test_keyed_noise_independence.py",
            "tests/test_release_logic.py",
            "tests/test_window_job_logic.py",
            "tests/test_continual_logic.py",
        ),
        optional_tests=(
            "tests/test_ldp_job_logic.py",
            "tests/test_several_bad_messages.py",
            "tests/test_mutation_kills_keys.py",
        ),
        # The keyed-noise contexts of the jobs' operators: what a release's, a DPSW shard's, a
        # continual-monitor node's PCC and an LDP report's noise is keyed by (distinct inputs must
        # draw independent noise, an identical replay the same). Not: the rest of the job logic
        # (routing, epochs and the fail-closed chain have their own units; releases, sketches and
        # windows are the core units).
        functions=(
            "EpochReleaser._rng",
            "WindowSettings.shard_noise_key",
            "LdpServerLogic._process",
            "ContinualSettings.noise_key",
        ),
    ),
    Module(
        "sketches",
        (
            "privstream/sketches/misra_gries.py",
            "privstream/sketches/counter_sketch.py",
            "privstream/sketches/kernels.py",
            "privstream/sketches/merge.py",
        ),
        ("tests/test_sketch_misra_gries.py", "tests/test_sketch_reference.py"),
        numba=True,
        optional_tests=("tests/test_mutation_kills_sketches.py",),
        # Alg. 1 (its kernel and the dict path, its initial state Dummy(0..k-1) at 0 and the order in
        # which zero-count slots are evicted), the slots PMG reads (all k, in the universe's order),
        # the decrement count and the fixed-order merge: what the sensitivity (Lemma 2, Cor. 7.2)
        # rests on. Not: serialisation, PAMG (Alg. 4: the reduction unit), the hash table's probing
        # (a wrong probe loses keys: caught as a wrong sketch by the same Alg. 1 reference tests, but
        # left out to keep the run short).
        functions=(
            "alg1_run",
            "Alg1Arrays.run",
            "Alg1Arrays.decrements",
            "MisraGries.decrements",
            "MisraGries.update",
            "MisraGries.update_batch",
            "MisraGries._alg1_dict",
            "MisraGries.counters",
            "MisraGries._rebuild_zero_heap",
            "MisraGries._to_arrays",
            "Alg1Arrays.__init__",
            "Alg1Arrays.fresh",
            "_sorted_zero_slots",
            "MisraGries.slots",
            "Alg1Arrays.real",
            "Alg1Arrays.dummies",
            "_sorted_by_key",
            "StandardMisraGries.update",
            "StandardMisraGries.update_batch",
            "CounterSketch._standard_update",
            "CounterSketch._standard_steps",
            "kth_largest",
            "mg_merge",
            "merge_in_order",
        ),
    ),
    Module(
        "dpsw",
        (
            "privstream/window/dpsw.py",
            "privstream/window/params.py",
            "privstream/window/checkpoints.py",
            "privstream/window/pcms.py",
            "privstream/window/kernels.py",
            "privstream/window/state.py",
        ),
        ("tests/test_window_core.py", "tests/test_window_state.py"),
        numba=True,
        optional_tests=("tests/test_keyed_noise_independence.py", "tests/test_mutation_kills_dpsw.py"),
        # What the window guarantee (DPSW Thm 4.3: ρ-zCDP per window) rests on: the per-substream
        # budgets and checkpoints, the noise each PCMS table gets and from which keyed source, and
        # which substream and table cells an event updates, the parameters dpsw_params derives and
        # the restore of the noise key (from_bytes; state.py's decode_state and the reachability
        # check of a restored checkpoint). Not: the query plan and estimates
        # (post-processing of the noisy tables), heavy-hitter selection, to_bytes, accessors.
        functions=(
            "DPSWSketch.__init__",
            "DPSWSketch._sampler",
            "DPSWSketch._keyed_sampler",
            "DPSWSketch.noise_context",
            "DPSWSketch._noise_tables",
            "DPSWSketch._create",
            "DPSWSketch.rekey",
            "DPSWSketch.substream_of",
            "DPSWSketch.substream_start",
            "DPSWSketch._add",
            "DPSWSketch.update",
            "DPSWSketch.update_batch",
            "DPSWSketch.from_bytes",
            "DPSWSketch._restore",
            "decode_state",
            "_require_reachable",
            "_fraction",
            "dpsw_params",
            "DPSWParams.budgets",
            "DPSWParams.substream_rho",
            "window_guarantee",
            "rho_from",
            "unit_fraction",
            "_checkpoints",
            "checkpoint_list",
            "validate_checkpoints",
            "budget_split",
            "substream_total",
            "discrete_gaussian_noise",
            "pcms_variance",
            "noisy_table",
            "HashFamily.buckets",
            "PCMS.__init__",
            "PCMS.add",
            "PCMS.add_batch",
            "add_items",
        ),
    ),
    Module(
        "release",
        (
            "privstream/mechanisms/pure_topk.py",
            "privstream/mechanisms/domain_topk.py",
            "privstream/mechanisms/chan.py",
            "privstream/mechanisms/release.py",
        ),
        (
            "tests/test_mechanisms_release.py",
            "tests/test_mechanisms_release_disjoint.py",
            "tests/test_mechanisms_domain_topk.py",
            "tests/test_mechanisms_registry.py",
        ),
        optional_tests=("tests/test_noise_parameters_recorded.py", "tests/test_mutation_kills_release.py"),
        # Five statistical law tests of the domain-wide top-k take 100 s of the unit's 136 s; the
        # exact order-statistics sampler they check is its own slow unit of work, left out here,
        # and the faster law tests of the same file stay.
        deselect=(
            "tests/test_mechanisms_domain_topk.py::test_efficient_matches_naive_in_distribution[None-4]",
            "tests/test_mechanisms_domain_topk.py::test_efficient_matches_naive_in_distribution[1-4]",
            "tests/test_mechanisms_domain_topk.py::test_max_of_many_matches_exact_law[1000000-scale0]",
            "tests/test_mechanisms_domain_topk.py::test_naive_comparison_has_power",
            "tests/test_mechanisms_domain_topk.py::test_max_of_many_matches_exact_law[1000000000000-scale1]",
        ),
        # What is charged, which mechanism runs and with which calibration, and the noise each
        # candidate gets (pure DP top-k, Chan et al.'s baselines, the domain-wide top-k's choice of
        # keys). Not: the exact order-statistics sampler (its own unit, order_statistics: its law tests
        # are the slow ones above), error bounds and applicable_mechanisms (what is stated/reported).
        functions=(
            "pure_topk_values",
            "_calibrate",
            "_prepare",
            "_sample",
            "DeclaredDomain.position",
            "DeclaredDomain.restrict",
            "_select",
            "_finish",
            "_check",
            "noisy_top_k_naive",
            "noisy_top_k",
            "chan_values",
            "chan_mechanism",
            "_sketch_facts",
            "_check_request",
            "_check_ledger",
            "_check_group_size",
            "_check_n_bound",
            "_charge_and_sample",
            "_plan",
            "release",
            "release_partitions",
            "_sum_items",
            "release_disjoint",
        ),
    ),
    Module(
        "blocks",
        ("privstream/continual/blocks.py",),
        ("tests/test_continual_blocks.py", "tests/test_continual_pcc.py"),
        optional_tests=("tests/test_mutation_kills_blocks.py",),
        # 90-108 s under mutmut's coverage tracing (over the per-test limit); the kill tests check
        # completion and expiry against the block definitions at the exact boundaries instead.
        deselect=(
            "tests/test_continual_blocks.py::test_completion_and_expiry_match_the_definitions[0.1-333]",
        ),
        # PCC's dyadic block structure (Chan et al. §4): the per-level ε_i, λ_i, β_i and noise scale,
        # the block boundaries, which blocks complete and expire, and the window cover that the
        # estimates sum. Every function of the file.
    ),
    Module(
        "reduction",
        (
            "privstream/sketches/sensitivity_reduction.py",
            "privstream/sketches/pamg.py",
            "privstream/sketches/kernels.py",
        ),
        ("tests/test_sketch_sensitivity_reduction.py", "tests/test_sketch_pamg.py"),
        numba=True,
        optional_tests=("tests/test_mutation_kills_reduction.py",),
        # Alg. 3 (sensitivity reduction: what is kept and its exact value, Lemmas 6.1/6.2, and the
        # §7 sum of partitions) and Alg. 4 (PAMG: the per-user decrement, Lemma 8.9, its compiled
        # batch and the checks that a user gives at most m distinct items). Not: to_bytes and the
        # stated bounds (l1_sensitivity, error_bound are constants/records read by the release).
        functions=(
            "ReducedSketch.denominator",
            "ReducedSketch.estimate",
            "ReducedSketch.values",
            "ReducedSketch.from_bytes",
            "_sorted",
            "reduce_sensitivity",
            "sum_reduced",
            "check_user_items",
            "PrivacyAwareMisraGries.__init__",
            "PrivacyAwareMisraGries.update",
            "PrivacyAwareMisraGries._add_user",
            "PrivacyAwareMisraGries.update_batch",
            "PrivacyAwareMisraGries.update_batch_flat",
            "PrivacyAwareMisraGries._check_mergeable",
            "PrivacyAwareMisraGries.merge",
            "PrivacyAwareMisraGries.merge_accumulator",
            "PrivacyAwareMisraGries._restore_extra",
            "_check_distinct_rows",
            "pamg_run",
            "pamg_update",
        ),
    ),
    Module(
        "failclosed",
        ("operators/shard_logic.py", "operators/release_logic.py", "operators/window_logic.py"),
        (
            "tests/test_flink_operator_logic.py",
            "tests/test_release_logic.py",
            "tests/test_window_job_logic.py",
            "tests/test_several_bad_messages.py",
            "tests/test_shard_flush.py",
        ),
        optional_tests=("tests/test_mutation_kills_failclosed.py",),
        # The jobs' fail-closed chain: a shard that sees a misrouted or refused message refuses
        # every later epoch (ShardSketcher, WindowShardLogic), the merge carries the first refusal
        # to every epoch it completes and completes epochs in a fixed order from data-independent
        # progress (EpochMerger), and the releaser publishes nothing for a refused epoch and charges
        # before it draws noise (EpochReleaser.decide). Also what a shard counts into which epoch
        # and what survives a flush; and the edge that states the outcome: a refusal is published
        # as a ReleaseRefused, a release's record carries its own ε, δ, relation, privacy unit,
        # epoch and time window (encode_outcome, release_record, _window). Not: the Avro codec,
        # logging, the keyed-noise contexts (keys unit).
        functions=(
            "encode_outcome",
            "release_record",
            "_window",
            "ShardSketcher._open_sketch",
            "ShardSketcher.flush",
            "ShardSketcher._take",
            "ShardSketcher.add",
            "ShardSketcher.refusal",
            "ShardSketcher.finish",
            "ShardSketcher._close_through",
            "EpochMerger.__init__",
            "EpochMerger.add",
            "EpochMerger._complete",
            "EpochReleaser.decide",
            "WindowShardLogic.__init__",
            "WindowShardLogic._check_restored",
            "WindowShardLogic.process",
            "WindowShardLogic.punctuate",
            "WindowShardLogic.add_events",
            "WindowShardLogic.add",
        ),
    ),
    Module(
        "registry",
        ("privstream/mechanisms/registry.py",),
        ("tests/test_mechanisms_registry.py", "tests/test_mechanisms_release.py"),
        optional_tests=("tests/test_mutation_kills_registry.py",),
        # What every mechanism's release is charged and states, and when it is refused: the privacy
        # map (PrivacyMap: δ = 0 charged for a pure mechanism; group privacy, Lebeda–Tětek Lemma 8.1,
        # for d_in > 1 and the check that it covers the budget), the per-step calibration for a
        # group of g events (one_step_budget, Lemma 8.1 inverted) and the refusals (Mechanism.refusal:
        # ε > 0, δ > 0 for (ε, δ) mechanisms, a declared domain, the sketch structure the theorem
        # needs). Not: the theorem and statement text, auto_key (the choice among mechanisms that
        # are all allowed: utility, not privacy), the registry's bookkeeping.
        functions=(
            "PrivacyMap.__call__",
            "PrivacyMap.covers",
            "PrivacyMap.charged",
            "one_step_budget",
            "counters_of",
            "Mechanism.needs_delta",
            "Mechanism.refusal",
        ),
    ),
    Module(
        "epochs",
        ("operators/epochs.py",),
        (
            "tests/test_flink_operator_logic.py",
            "tests/test_several_bad_messages.py",
            "tests/test_mutation_kills_failclosed.py",
            "tests/test_ledger_partition.py",
        ),
        optional_tests=("tests/test_mutation_kills_epochs.py",),
        # Which epoch each event of a shard counts into and when epochs close: count epochs cut on
        # public positions, time epochs on event time with the public lateness and the shard's
        # punctuation clock (a data-dependent cut would break the epochs' disjointness, the
        # parallel composition the job's ledger relies on). Not: the stated relation and its text.
        functions=(
            "ShardProgress.close_through",
            "ShardProgress.from_bytes",
            "ShardProgress.punctuate",
            "CountEpochs.__init__",
            "CountEpochs.shard_events_bound",
            "CountEpochs.split",
            "CountEpochs.closable_through",
            "CountEpochs.final_through",
            "TimeEpochs.__init__",
            "TimeEpochs._times",
            "TimeEpochs.split",
            "TimeEpochs.closable_through",
            "TimeEpochs.final_through",
        ),
    ),
    Module(
        "spend",
        ("operators/release_logic.py", "connectors/ledger_topic.py"),
        ("tests/test_release_logic.py", "tests/test_ledger_partition.py"),
        optional_tests=("tests/test_mutation_kills_spend.py",),
        # How a job's ledger is set up and resumed, outside the ledger itself: the composition a job
        # charges under (new_ledger: parallel over its public epoch boundaries for event-level
        # jobs, sequential for user-level ones), the more advanced of the restored and the topic's
        # ledger at start-up (reconcile_ledgers: never the one that forgot spend), and the fold of
        # the ledger topic's records into that state (ChainReader). Not: the Kafka reads and writes
        # around them (Kafka tests are not in the mutation runs; their logic is these functions).
        functions=(
            "new_ledger",
            "reconcile_ledgers",
            "record_state",
            "ChainReader.add",
            "ChainReader.result",
        ),
    ),
    Module(
        "order_statistics",
        ("privstream/mechanisms/order_statistics.py",),
        ("tests/test_mutation_kills_order_statistics.py",),
        # The exact sampler of the largest discrete Laplace noise values among N zero-count elements
        # (the domain-wide top-k's noise). Its own unit because the statistical law tests of
        # tests/test_mechanisms_domain_topk.py take minutes: this unit runs fast deterministic tests
        # against an independent high-precision computation of the same law instead.
    ),
)
BY_NAME = {m.name: m for m in MODULES}


# ---- the workspace --------------------------------------------------------------------------------


def installed_path(source: str) -> str:
    """The path of ``source`` in the installed layout (``operators/x.py`` -> ``privstream/operators/x.py``)."""
    head, _, tail = source.partition("/")
    return f"{PACKAGE_DIRS[head]}/{tail}" if head in PACKAGE_DIRS else source


def source_path(installed: str) -> str:
    """Inverse of :func:`installed_path`."""
    for src, dst in PACKAGE_DIRS.items():
        if installed.startswith(dst + "/"):
            return src + installed[len(dst) :]
    return installed


_HOISTED = re.compile(r"^(property|(functools\.)?lru_cache(\(.*\))?|(functools\.)?cache)$")


def make_mutable(text: str, numba: bool) -> tuple[str, list[int | None]]:
    """Rewrite decorators mutmut skips so that their functions are mutated (in the workspace only).

    Returns the new text and, for each of its lines (1-based index - 1), the original line number
    (None for inserted lines)."""
    tree = ast.parse(text)
    lines = text.splitlines()
    blank: set[int] = set()
    after: dict[int, list[str]] = {}  # original end line -> lines to insert after it
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or len(node.decorator_list) != 1:
            continue
        deco = node.decorator_list[0]
        deco_text = ast.get_source_segment(text, deco) or ""
        indent = " " * node.col_offset
        if numba and deco_text.startswith("njit"):
            blank.update(range(deco.lineno, deco.end_lineno + 1))
        elif _HOISTED.match(deco_text):
            blank.update(range(deco.lineno, deco.end_lineno + 1))
            wrap = deco_text if deco_text == "property" else f"_mm_per_mutant({deco_text})"
            after.setdefault(node.end_lineno or node.lineno, []).append(
                f"{indent}{node.name} = {wrap}({node.name})"
            )
    out: list[str] = []
    origin: list[int | None] = []
    for number, line in enumerate(lines, start=1):
        out.append("" if number in blank else line)
        origin.append(number)
        for extra in after.get(number, []):
            out.append(extra)
            origin.append(None)
    if after:  # the helper import goes after the module docstring and __future__ imports
        body = tree.body
        last = 0
        for stmt in body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                last = stmt.end_lineno or last
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and stmt is body[0]:
                last = stmt.end_lineno or last
        at = origin.index(last) + 1 if last else 0
        out.insert(at, "from privstream._mutation_support import per_mutant as _mm_per_mutant")
        origin.insert(at, None)
    return "\n".join(out) + "\n", origin


#: seconds one test may run under a mutant (pytest-timeout, via PYTEST_ADDOPTS so that mutmut's
#: configuration and its cached verdicts are unchanged): a mutant that makes a sampler's loop run
#: forever fails that test — counted as killed — after this, not after mutmut's own timeout (5x the
#: whole selection's time, minutes). 4x the slowest test of any unit under mutmut's trampolines.
MUTANT_TEST_TIMEOUT_S = 60

#: address-space limit of mutmut and its test processes: a mutant that makes a search run away
#: (e.g. σ grown without bound, each step building larger discrete Gaussian tables) fails with a
#: MemoryError, i.e. is killed, instead of exhausting the machine's memory
MEMORY_LIMIT = 6 * 2**30


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


#: appended to the workspace's tests/conftest.py (never the repository's): under a mutant, the kill
#: tests first, then the others fastest first (mutmut's recorded durations), so that a killed mutant
#: stops (``-x``) at the first cheap test that fails on it. Order only: a survivor still runs every
#: test.
ORDER_HOOK = """

# ---- mutation workspace only (benchmarks/mutation.py): run the cheapest tests first ----
def pytest_collection_modifyitems(session, config, items):
    import json
    from pathlib import Path

    stats = Path("mutmut-stats.json")
    durations = json.loads(stats.read_text()).get("duration_by_test", {}) if stats.exists() else {}
    items.sort(key=lambda item: ("test_mutation_kills_" not in item.nodeid, durations.get(item.nodeid, 0.0)))
"""

SUPPORT = '''"""Mutation workspace only: caches keyed by the active mutant as well as the arguments."""

import functools


def per_mutant(decorator):
    def wrap(func):
        cached = decorator(lambda _mutant, *args, **kwargs: func(*args, **kwargs))

        @functools.wraps(func)
        def call(*args, **kwargs):
            from mutmut.mutation.trampoline import get_mutant_under_test

            mutant = get_mutant_under_test()
            if mutant == "stats":  # mutmut's coverage run: every call must reach the function, or
                return func(*args, **kwargs)  # a test served from the cache is not run for its mutants
            return cached(mutant, *args, **kwargs)

        call.cache_clear = cached.cache_clear
        call.cache_info = cached.cache_info
        return call

    return wrap
'''


BASE_TESTS_ONLY = False  # --base-tests-only: the module's pre-existing tests, without the optional ones


def module_tests(module: Module) -> list[str]:
    if BASE_TESTS_ONLY:
        return list(module.tests)
    return list(module.tests) + [t for t in module.optional_tests if (ROOT / t).exists()]


def build_workspace(module: Module, fresh: bool) -> Path:
    """Copy the package (installed layout) and the tests into ``build/mutation/<module>``."""
    ws = WORK / module.name
    if fresh and ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("privstream", "tests"):
        if (ws / name).exists():
            shutil.rmtree(ws / name)
        shutil.copytree(ROOT / name, ws / name, ignore=ignore)
    for src, dst in PACKAGE_DIRS.items():
        shutil.copytree(ROOT / src, ws / dst, ignore=ignore)
    (ws / "privstream" / "_mutation_support.py").write_text(SUPPORT)
    conftest = (ROOT / "tests" / "conftest.py").read_text() + ORDER_HOOK
    for tests in (ws / "tests", ws / "mutants" / "tests"):  # mutmut copied the tests once
        if tests.exists():
            (tests / "conftest.py").write_text(conftest)
    origins: dict[str, list[int | None]] = {}
    for source in module.sources:
        target = ws / installed_path(source)
        text, origin = make_mutable((ROOT / source).read_text(), module.numba)
        target.write_text(text)
        origins[source] = origin
    (ws / "line_origins.json").write_text(json.dumps(origins))
    if (ws / "mutants" / "privstream").exists():
        # mutmut copies the package into mutants/ once; refresh it so that a rerun (--survivors)
        # tests today's code (mutmut regenerates the mutated files and keeps the results of every
        # function whose source is unchanged)
        shutil.copytree(ws / "privstream", ws / "mutants" / "privstream", dirs_exist_ok=True)
    pyproject = (ROOT / "pyproject.toml").read_text()
    config = {
        "source_paths": ["privstream"],
        "only_mutate": [installed_path(s) for s in module.sources],
        "pytest_add_cli_args": PYTEST_ARGS + [a for d in module.deselect for a in ("--deselect", d)],
        "pytest_add_cli_args_test_selection": module_tests(module),
        "do_not_mutate_patterns": DO_NOT_MUTATE,
        "process_isolation": "forkserver",
        "use_git_change_detection": False,
        "timeout_multiplier": 5.0,
    }
    block = "\n[tool.mutmut]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in config.items())
    (ws / "pyproject.toml").write_text(pyproject + block)
    return ws


def open_mutants(module: Module) -> list[str]:
    """Names of the in-scope mutants of the last run that are not killed (to rerun after new tests)."""
    if not (WORK / module.name / "line_origins.json").exists():
        return []
    return [
        m.key
        for m in collect(module)
        if module.in_scope(m.function) and m.status not in ("killed", "timeout")
    ]


def run_module(module: Module, fresh: bool, survivors_only: bool = False, jobs: int = 1) -> int:
    names = open_mutants(module) if survivors_only else module.globs()
    if survivors_only and not names:
        log.info("module %s: no open mutants to rerun", module.name)
        return 0
    ws = build_workspace(module, fresh)
    # mutmut resets every cached verdict when the test selection changes (new test files); a
    # killed mutant stays killed when tests are only added, so the verdicts of the mutants not
    # rerun are restored afterwards.
    before = {p: json.loads(p.read_text()) for p in (ws / "mutants").rglob("*.py.meta")}
    env = dict(os.environ)
    env.pop("MUTANT_UNDER_TEST", None)
    env["PYTEST_ADDOPTS"] = f"-o timeout={MUTANT_TEST_TIMEOUT_S}"
    if module.numba:
        env["NUMBA_DISABLE_JIT"] = "1"
    mutmut = Path(sys.executable).with_name("mutmut")
    log.info("module %s: mutmut run in %s (tests: %s)", module.name, ws, " ".join(module_tests(module)))
    with open(ws / "mutmut.log", "w") as out:
        proc = subprocess.run(
            [str(mutmut), "run", "--max-children", str(jobs), *names],
            cwd=ws,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_limit_memory,
        )
    log.info("module %s: mutmut exit code %d (log %s)", module.name, proc.returncode, ws / "mutmut.log")
    if survivors_only:
        rerun = set(names)
        for path, old_meta in before.items():
            meta = json.loads(path.read_text())
            codes, old = meta["exit_code_by_key"], old_meta["exit_code_by_key"]
            hashes, old_hashes = meta["hash_by_function_name"], old_meta["hash_by_function_name"]

            def same_function(key: str, hashes: dict = hashes, old_hashes: dict = old_hashes) -> bool:
                fn = key.rpartition("__mutmut_")[0].rpartition(".")[2]
                return hashes.get(fn) is not None and hashes.get(fn) == old_hashes.get(fn)

            restored = {
                k: old[k]
                for k, v in codes.items()
                if v is None and k not in rerun and old.get(k) is not None and same_function(k)
            }
            if restored:
                codes.update(restored)
                path.write_text(json.dumps(meta, indent=4))
                log.info("module %s: kept %d earlier verdicts in %s", module.name, len(restored), path.name)
    return proc.returncode


# ---- results --------------------------------------------------------------------------------------


@dataclass
class Mutant:
    key: str
    file: str
    line: int | None
    function: str
    original: str
    mutated: str
    status: str
    reason: str | None = None


def _function_name(mangled: str) -> str:
    name = mangled.rpartition(".")[2]
    if name.startswith("xǁ"):
        _, cls, fn = name.split("ǁ")
        return f"{cls}.{fn}"
    return name[2:]


def _def_lines(text: str) -> dict[str, int]:
    """Line of the ``def`` of every function, keyed ``Class.name`` / ``name``."""
    out: dict[str, int] = {}

    def visit(nodes: Iterable[ast.stmt], prefix: str) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out.setdefault(prefix + node.name, node.lineno)
            elif isinstance(node, ast.ClassDef):
                visit(node.body, prefix + node.name + ".")

    visit(ast.parse(text).body, "")
    return out


def _generated(ws: Path, installed: str) -> dict[str, list[str]]:
    spans = json.loads((ws / "mutants" / (installed + ".spans")).read_text())["spans"]
    lines = (ws / "mutants" / installed).read_text().splitlines()
    return {name: lines[a - 1 : b] for name, (a, b) in spans.items()}


def collect(module: Module) -> list[Mutant]:
    ws = WORK / module.name
    origins = json.loads((ws / "line_origins.json").read_text())
    out: list[Mutant] = []
    for source in module.sources:
        installed = installed_path(source)
        meta_path = ws / "mutants" / (installed + ".meta")
        if not meta_path.exists():
            continue
        codes = json.loads(meta_path.read_text())["exit_code_by_key"]
        generated = _generated(ws, installed)
        defs = _def_lines((ws / installed).read_text())
        origin = origins[source]
        for key, code in sorted(codes.items()):
            mangled_fn, _, number = key.rpartition("__mutmut_")
            short = mangled_fn.rpartition(".")[2]
            orig = generated.get(f"{short}__mutmut_orig", [])
            mutant = generated.get(f"{short}__mutmut_{number}", [])
            original, mutated, offset = "", "", None
            orig_cmp = [ln.replace(f"{short}__mutmut_orig", "NAME") for ln in orig]
            mut_cmp = [ln.replace(f"{short}__mutmut_{number}", "NAME") for ln in mutant]
            def_index = next(
                (i for i, ln in enumerate(orig_cmp) if re.match(r"\s*(async\s+)?def NAME", ln)), 0
            )
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
                None, orig_cmp, mut_cmp, autojunk=False
            ).get_opcodes():
                if tag != "equal":
                    original = "\n".join(s.strip() for s in orig_cmp[i1:i2])
                    mutated = "\n".join(s.strip() for s in mut_cmp[j1:j2])
                    offset = i1 - def_index
                    break
            function = _function_name(mangled_fn)
            line = None
            if offset is not None and function in defs:
                ws_line = defs[function] + offset
                line = origin[ws_line - 1] if 0 < ws_line <= len(origin) else None
            status = STATUS.get(code, "not checked" if code is None else "suspicious")
            out.append(Mutant(key, source, line, function, original, mutated, status))
    return out


def load_equivalents(path: Path = EQUIVALENTS) -> list[dict[str, str]]:
    if not path.exists():
        return []
    return list(tomllib.loads(path.read_text()).get("equivalent", []))


def _norm(text: str) -> str:
    return " ".join(text.split())


def apply_equivalents(
    mutants: Sequence[Mutant], equivalents: Sequence[dict[str, str]]
) -> list[dict[str, str]]:
    """Mark listed survivors equivalent; return the entries that matched no survivor (stale)."""
    used: set[int] = set()
    for m in mutants:
        if m.status not in ("survived", "no tests"):
            continue
        for i, e in enumerate(equivalents):
            if (
                e["file"] == m.file
                and e["function"] == m.function
                and _norm(e["original"]) == _norm(m.original)
                and (e["mutated"] == "*" or _norm(e["mutated"]) == _norm(m.mutated))
            ):
                m.status, m.reason = "equivalent", e["reason"]
                used.add(i)
                break
    return [e for i, e in enumerate(equivalents) if i not in used]


def summarise(mutants: Sequence[Mutant]) -> dict[str, int | float]:
    count = {s: sum(m.status == s for m in mutants) for s in ("killed", "timeout", "survived", "no tests")}
    count["equivalent"] = sum(m.status == "equivalent" for m in mutants)
    count["not checked"] = sum(m.status == "not checked" for m in mutants)
    count["other"] = len(mutants) - sum(count.values())
    total = len(mutants) - count["not checked"]
    justified = count["killed"] + count["timeout"] + count["equivalent"]
    return {"mutants": total, **count, "kill_rate": round(100 * justified / total, 1) if total else 0.0}


def _one_line(text: str) -> str:
    return " ⏎ ".join(text.splitlines())


def _previous_run(name: str) -> tuple[list[Mutant], int] | None:
    """A unit's in-scope mutants and out-of-scope count as the committed report last recorded them
    (for a unit without a workspace here, e.g. on a fresh clone that ran only other units); the
    equivalents are applied again, so the entries' current reasons and staleness hold."""
    if not REPORT_JSON.exists():
        return None
    previous = json.loads(REPORT_JSON.read_text())
    if name not in previous.get("mutants", {}):
        return None
    mutants = [Mutant(**m) for m in previous["mutants"][name]]
    for m in mutants:
        if m.status == "equivalent":
            m.status, m.reason = "survived", None
    return mutants, int(previous["modules"][name].get("out_of_scope", 0))


def write_report(names: Sequence[str]) -> dict[str, dict[str, int | float]]:
    equivalents = load_equivalents()
    table: dict[str, dict[str, int | float]] = {}
    listing: dict[str, list[Mutant]] = {}
    stale: list[dict[str, str]] = list(equivalents)
    for name in names:
        module = BY_NAME[name]
        everything = collect(module) if (WORK / name / "line_origins.json").exists() else []
        if not everything:  # no run here: keep the unit's last recorded run
            kept = _previous_run(name)
            if kept is None:
                continue
            mutants, out_of_scope = kept
            unused = apply_equivalents(mutants, equivalents)
            stale = [e for e in stale if e in unused]
            table[name] = summarise(mutants)
            table[name]["out_of_scope"] = out_of_scope
            listing[name] = mutants
            continue
        mutants = [m for m in everything if module.in_scope(m.function)]
        unused = apply_equivalents(mutants, equivalents)
        stale = [e for e in stale if e in unused]
        table[name] = summarise(mutants)
        table[name]["out_of_scope"] = len(everything) - len(mutants)
        listing[name] = mutants
    all_mutants = [m for ms in listing.values() for m in ms]
    total = summarise(all_mutants)
    md = [
        "# Mutation report (privacy-critical modules)",
        "",
        "Generated by `python benchmarks/mutation.py` (mutmut 3; see the module docstring). Kill rate ="
        " (killed + timeout + equivalent listed in `benchmarks/mutation_equivalent.toml`) / mutants;"
        " `no tests` mutants are not covered by the module's tests and count as survivors.",
        "",
        "| module | mutants run | killed | timeout | survived | no tests | equivalent | kill rate | not run |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in [*table.items(), ("**total**", total)]:
        md.append(
            f"| {name} | {row['mutants']} | {row['killed']} | {row['timeout']} | {row['survived']} | "
            f"{row['no tests']} | {row['equivalent']} | {row['kill_rate']} % | {row['not checked']} |"
        )
    for name, mutants in listing.items():
        left = [m for m in mutants if m.status in ("survived", "no tests", "suspicious", "segfault")]
        unchecked = sum(m.status == "not checked" for m in mutants)
        md += [
            "",
            f"## {name}: {len(left)} surviving" + (f", {unchecked} not run yet" if unchecked else ""),
            "",
        ]
        md += [
            f"- `{m.file}:{m.line}` {m.function} [{m.status}]: `{_one_line(m.original)}` -> `{_one_line(m.mutated)}`"
            for m in left
        ]
    if stale:
        md += ["", "## Equivalent entries that matched no survivor (stale)", ""]
        md += [f"- `{e['file']}` {e['function']}: `{e['original']}` -> `{e['mutated']}`" for e in stale]
    REPORT_MD.write_text("\n".join(md) + "\n")
    REPORT_JSON.write_text(
        json.dumps(
            {
                "modules": table,
                "total": total,
                "mutants": {n: [m.__dict__ for m in ms] for n, ms in listing.items()},
                "stale_equivalents": stale,
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n"
    )
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("modules", nargs="*", help=f"modules to run (default: all of {', '.join(BY_NAME)})")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the report")
    parser.add_argument("--list", action="store_true", help="list the modules, files and tests")
    parser.add_argument(
        "--base-tests-only", action="store_true", help="without the optional (new) test files"
    )
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="rerun only the last run's surviving / unrun mutants (after new tests)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="reuse the workspace (mutmut keeps unchanged results)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="mutants tested at once (default 1; more only on an otherwise idle machine: a loaded one "
        "turns slow tests into timeouts)",
    )
    args = parser.parse_args(argv)
    global BASE_TESTS_ONLY
    BASE_TESTS_ONLY = args.base_tests_only
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    names = list(args.modules) or list(BY_NAME)
    unknown = sorted(set(names) - set(BY_NAME))
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {list(BY_NAME)}")
    if args.list:
        for name in names:
            m = BY_NAME[name]
            print(f"{name}: {' '.join(m.sources)}\n    tests: {' '.join(module_tests(m))}")
        return 0
    if not args.report_only:
        for name in names:
            run_module(
                BY_NAME[name],
                fresh=not (args.keep or args.survivors),
                survivors_only=args.survivors,
                jobs=args.jobs,
            )
    table = write_report(list(BY_NAME))
    for name, row in table.items():
        print(f"{name:12s} {row}")
    print(f"report: {REPORT_MD.relative_to(ROOT)}, {REPORT_JSON.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
