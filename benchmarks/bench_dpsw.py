"""Throughput and memory of DPSW-Sketch (privstream.window) on the paper's Zipf workload.

Stream: the DPSW App. A Zipf mixture (95 % Zipf(1) on 1..25,600, 5 % uniform; privstream.datagen,
fixed seed), 10^7 items by default. Timed:

* ``np.bincount`` over each batch (the floor for any exact counting of the same batch);
* DPSW ``update_batch`` at the paper's default setting (w = 10^6, W = 10^5, |I| = 3 with
  I = [W, ⌈√W⌉, 1], a = 3, b = 2000, ε = 1, δ = n^−1.5), in batches: the total rate (noise of every
  new substream's 5 PCMSs drawn by the exact discrete-Gaussian sampler from the CSPRNG, included)
  and the counter-update rate without the noise draws (``noise_seconds`` subtracted), each as a
  ratio to ``np.bincount`` on the same batches. Target: >= 10^6 items/s on one core (10× the
  paper's ≈ 100 K ops/s C++), measured end to end: the noise of a new substream is part of
  maintenance, so the total rate is the one compared with the target;
* the update rate (noise excluded: a zero sampler, benchmark only) against |I|, a and the number of
  substreams per window (Appendix C: linear in |I| and a, flat in substreams);
* memory: the live PCMSs and their bytes (int64 counters) at the end of the stream, and the
  maximum over the run (sampled right after each substream's first item, where it peaks), against
  ⌈w/W⌉·|I| + 2|I| − 1 (⌈w/W⌉ complete substreams keep |I| PCMSs, the current one 2|I| − 1).

Run: ``flock /tmp/privstream-heavy.lock .venv/bin/python benchmarks/bench_dpsw.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_sketches import timed

from privstream import datagen
from privstream.eval.studies.dpsw import default_params
from privstream.window import DPSWSketch


def zero_noise(sigma2: object, count: int) -> np.ndarray:
    """Benchmark only: isolates the update cost from the noise draws."""
    return np.zeros(count, dtype=np.int64)


def build(n: int, window: int, substream: int, count: int, depth: int, width: int, noise: bool) -> DPSWSketch:
    p = default_params(
        n, window=window, substream=substream, checkpoint_count=count, depth=depth, width=width
    )
    return DPSWSketch(p, noise=None if noise else zero_noise)


def feed(sketch: DPSWSketch, batches: list[np.ndarray]) -> tuple[float, int]:
    """Seconds to ingest every batch, and the most live PCMSs seen. The peak is inside a batch:
    right after a substream's first item (its 2|I| − 1 PCMSs created, the oldest substream not yet
    expired), so each batch is also cut there and the count sampled (a few more calls per batch)."""
    most, spent = 0, 0.0
    length = sketch.params.substream
    for b in batches:
        first = sketch.clock + 1  # COUNT: the next position
        starts = [i + 1 for i in range((-(first - 1)) % length, len(b), length)]
        bounds = sorted({0, *starts, len(b)})
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            start = time.perf_counter()
            sketch.update_batch(b[lo:hi])
            spent += time.perf_counter() - start
            most = max(most, sketch.live_pcms())
    return spent, most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10**7)
    parser.add_argument("--batch", type=int, default=10**6)
    parser.add_argument("--window", type=int, default=10**6)
    parser.add_argument("--sweep-items", type=int, default=2 * 10**6)
    parser.add_argument("--seed", type=int, default=20261124)
    args = parser.parse_args()

    stream = datagen.zipf_items(args.items, universe=25_600, s=1.0, seed=args.seed)
    batches = [stream[i : i + args.batch] for i in range(0, len(stream), args.batch)]
    n, w = len(stream), args.window
    bincount = sum(timed(lambda b=b: np.bincount(b, minlength=25_601), 3) for b in batches)
    print(f"stream: {n:,} items, DPSW App. A Zipf(1) + 5% uniform on 1..25600, seed {args.seed}")
    print(f"np.bincount per batch of {args.batch:,}: {n / bincount / 1e6:8.1f} M items/s")

    warm = build(n, 100, 10, 3, 3, 16, noise=False)
    warm.update_batch(stream[:1000])  # compile (or load) the numba kernel outside the timings
    sketch = build(n, w, w // 10, 3, 3, 2000, noise=True)
    spent, most = feed(sketch, batches)
    update = spent - sketch.noise_seconds
    print(
        f"\nDPSW w={w:,} W={w // 10:,} I={list(sketch.params.checkpoints)} a=3 b=2000, eps=1 (CSPRNG noise)"
    )
    verdict = "PASS" if n / spent >= 1e6 else "FAIL"
    print(
        f"  total (noise included): {n / spent / 1e6:6.2f} M items/s  ratio to bincount {bincount / spent:.4f}"
        f"  target >= 1 M items/s end to end: {verdict}"
    )
    substreams = -(-n // sketch.params.substream)
    pcms = 2 * len(sketch.params.checkpoints) - 1
    print(
        f"  noise draws: {sketch.noise_seconds:.1f} s for {substreams} substreams x {pcms} PCMSs x 6000 counters"
    )
    print(
        f"  counter updates only:   {n / update / 1e6:6.2f} M items/s  ratio to bincount {bincount / update:.4f}"
        " (noise-draw time subtracted; not the target's measure)"
    )
    pts = len(sketch.params.checkpoints)
    print(f"  insertions per item: {sketch.insertions / n:.3f} (<= 2|I| - 1 = {2 * pts - 1})")
    print(
        f"  memory: {sketch.live_pcms()} live PCMSs = {sketch.memory_bytes() / 2**20:.1f} MiB (max {most} live, "
        f"bound {-(-w // sketch.params.substream) * pts + 2 * pts - 1})"
    )

    sweep = batches_of(stream[: args.sweep_items], args.batch)
    m = len(stream[: args.sweep_items])
    print(
        f"\nupdate rate, noise excluded ({m:,} items, w={w:,}), M items/s; live PCMSs at the end (max) and MiB"
    )
    print(f"{'setting':>28} {'rate':>6} {'ins/item':>8} {'live':>5} {'max':>5} {'bound':>5} {'MiB':>7}")
    settings = [("|I|", c, 3, 10) for c in (2, 3, 5, 8)]
    settings += [("a", 3, a, 10) for a in (2, 4, 5)]
    settings += [("substreams/window", 3, 3, s) for s in (5, 20, 50)]
    for label, count, depth, per_window in settings:
        s = build(m, w, w // per_window, count, depth, 2000, noise=False)
        secs, peak = feed(s, sweep)
        pts = len(s.params.checkpoints)
        bound = per_window * pts + 2 * pts - 1
        value = {"|I|": pts, "a": depth}.get(label, per_window)
        name = f"{label}={value} (|I|={pts},a={depth},{per_window}/w)"
        print(
            f"{name:>28} {m / secs / 1e6:6.2f} {s.insertions / m:8.3f} {s.live_pcms():5d} {peak:5d} "
            f"{bound:5d} {s.memory_bytes() / 2**20:7.1f}"
        )


def batches_of(stream: np.ndarray, size: int) -> list[np.ndarray]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


if __name__ == "__main__":
    main()
