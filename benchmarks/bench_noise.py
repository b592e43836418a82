"""Benchmark: exact noise for k = 1000 counters, full k = 1000 releases, and the draw rate of the
discrete-Gaussian array sampler (scalar CKS kernels vs the vectorised path).

Run (one heavy job at a time on the shared machine):
    flock /tmp/privstream-heavy.lock .venv/bin/python benchmarks/bench_noise.py [--draws-only]

Targets: noise for k = 1000 counters in < 50 ms with the production CSPRNG source; the array
sampler at <= 1 µs per draw (DPSW-Sketch's PCMS noise: 6000 draws per call at σ² = a/ρ_j).
Prints the median and 90th percentile over repeats, in milliseconds, then draws/s per σ² and source.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from privstream.accounting import Budget
from privstream.mechanisms import calibrate_gshm, release
from privstream.noise import CryptoRandomSource, discrete_gaussian_array, discrete_laplace_array
from privstream.noise.discrete import _gaussian_array
from privstream.noise.rng import KeyedRandomSource, RandomSource, new_noise_key
from privstream.noise.vectorised import Limits
from privstream.sketches import MisraGries, StandardMisraGries, merge_in_order


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def zipf_stream(seed: int, n: int, universe: int) -> list[int]:
    # synthetic benchmark data (numpy.random is fine for data generation, never for noise)
    return [int(x) for x in np.random.default_rng(seed).zipf(1.2, n) % universe]


def dpsw_variances() -> list[Fraction]:
    """σ² = a/ρ_j of benchmarks/bench_dpsw.py's default DPSW setting (a = 3, three checkpoints)."""
    from privstream.eval.studies.dpsw import default_params
    from privstream.window.pcms import pcms_variance

    p = default_params()
    return [pcms_variance(p.depth, rho) for rho in p.budgets]


def draws_per_second(sample: Callable[[int], object], count: int, repeats: int) -> float:
    """Median draws/s of ``sample(count)`` over ``repeats`` timed calls (after one warm-up call)."""
    sample(count)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sample(count)
        times.append(time.perf_counter() - start)
    return count / statistics.median(times)


def draw_rates(repeats: int) -> None:
    """Draws/s of the scalar CKS kernels (the whole-array fallback, forced) and of the vectorised
    path, at DPSW's σ² and σ² ∈ {1, 100, 10^4}, with the CSPRNG and the keyed DRBG."""
    scalar = Limits(max_t=0)
    sources: list[tuple[str, RandomSource]] = [
        ("crypto", CryptoRandomSource()),
        ("keyed", KeyedRandomSource(new_noise_key(), "bench")),
    ]
    variances = [(f"DPSW a/rho_{j + 1} = {float(v):.1f}", v) for j, v in enumerate(dpsw_variances())]
    variances += [(f"{v}", Fraction(v)) for v in (1, 100, 10**4)]
    print(
        f"\n{'sigma2':<26} {'source':<7} {'scalar/s':>10} {'array/s n=6000':>15} {'array/s n=1e5':>14} {'speedup':>8}"
    )
    for label, sigma2 in variances:
        for name, rng in sources:
            old = draws_per_second(
                lambda c, v=sigma2, r=rng: _gaussian_array(v, c, r, scalar), 5000, max(1, repeats // 10)
            )
            small = draws_per_second(
                lambda c, v=sigma2, r=rng: discrete_gaussian_array(v, c, r), 6000, repeats
            )
            large = draws_per_second(
                lambda c, v=sigma2, r=rng: discrete_gaussian_array(v, c, r), 100_000, max(3, repeats // 5)
            )
            print(f"{label:<26} {name:<7} {old:10.3g} {small:15.3g} {large:14.3g} {small / old:7.1f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--draws-only", action="store_true", help="only the array-sampler draw rates")
    args = parser.parse_args()
    if args.draws_only:
        draw_rates(args.repeats)
        return 0
    k, reps = args.k, args.repeats
    rng = CryptoRandomSource()
    eps, delta = 1.0, 1e-6
    gshm = calibrate_gshm(eps, delta, k)
    rows: list[tuple[str, tuple[float, float]]] = []
    rows.append(
        (f"discrete Laplace x{k}, scale 1/eps = 1", timed(lambda: discrete_laplace_array(1, k, rng), reps))
    )
    rows.append(
        (f"discrete Laplace x{k}, scale k/eps = {k}", timed(lambda: discrete_laplace_array(k, k, rng), reps))
    )
    rows.append(
        (
            f"discrete Gaussian x{k}, sigma2 = {float(gshm.sigma2):.1f} (GSHM l=k)",
            timed(lambda: discrete_gaussian_array(gshm.sigma2, k, rng), reps),
        )
    )
    rows.append(
        (
            f"discrete Gaussian x{k}, sigma2 = 1",
            timed(lambda: discrete_gaussian_array(Fraction(1), k, rng), reps),
        )
    )

    items = zipf_stream(1, 200_000, 50_000)
    mg = MisraGries(k)
    for x in items:
        mg.update(x)
    budget = Budget(eps, delta)
    rows.append(
        (
            f"PMG release, Alg. 1 sketch k={k} (all k slots)",
            timed(lambda: release(mg, budget, mechanism="pmg"), reps),
        )
    )
    parts = []
    for seed in range(4):
        part = StandardMisraGries(k)
        part.update_batch(zipf_stream(seed, 100_000, 50_000))
        parts.append(part)
    merged = merge_in_order(parts, k=k)
    calibrate_gshm.cache_clear()
    rows.append(
        ("GSHM calibration (exact Thm 8.5 search), l=k", timed(lambda: calibrate_gshm(eps, delta, k), 1))
    )
    rows.append(
        (
            f"GSHM release, merged sketch k={k} ({len(merged.counters())} non-zero counters)",
            timed(lambda: release(merged, budget, mechanism="gshm"), reps),
        )
    )
    rows.append(
        (
            f"pure eps-DP top-k (Alg. 3 + Laplace(2/eps)), k={k}, d=1e9",
            timed(
                lambda: release(mg, Budget(eps), mechanism="pure_topk", domain=range(10**9)),
                max(3, reps // 10),
            ),
        )
    )
    width = max(len(name) for name, _ in rows)
    print(f"{'benchmark'.ljust(width)}  median ms    p90 ms")
    for name, (med, p90) in rows:
        print(f"{name.ljust(width)}  {med:9.2f}  {p90:8.2f}")
    draw_rates(args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
