"""Benchmark: HG-LDP client randomisation rate per scheme and server reports/s in the core.

Run (one heavy job at a time on the shared machine):
    flock /tmp/privstream-heavy.lock .venv/bin/python benchmarks/bench_ldp.py

Setting: d = 1000, k = 20, ε = 1 (α = 1/3, λ_l = 5 for CNR), a Normal(500, 10) stream, the
production CSPRNG. "client" times ``encode`` (the randomiser and the report object) against a
fixed public state; "server" times, in the sequential simulation's loop, ``public_state`` (the
state is republished before every report) plus ``add`` (decode, state lookup, debiased ED,
bookkeeping); GRR, OLH and HR clients are timed for comparison. Prints reports/s (median of ``--repeats`` runs, one core).
The Flink job's and its operator's rates: ``benchmarks/bench_ldp_job.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from privstream.datagen import normal_items
from privstream.ldp import (
    SCHEMES,
    GeneralizedRandomizedResponse,
    HadamardResponse,
    HgLdpParams,
    HgLdpServer,
    LocalRandomiser,
    OptimisedLocalHashing,
    make_client,
)


def rate(action: object, items: list[int], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for v in items:
            action(v)  # type: ignore[operator]
        samples.append(len(items) / (time.perf_counter() - start))
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000, help="reports per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    d, k, eps = 1000, 20, args.epsilon
    items = (normal_items(args.n + 5000, domain=d, std=10, seed=1) - 1).tolist()
    warm, stream = items[:5000], items[5000:]
    print(
        f"d = {d}, k = {k}, ε = {eps}, {len(stream)} reports, median of {args.repeats} (reports/s, one core)"
    )
    print(f"{'scheme':<8} {'client encode':>14} {'server add':>12}")
    for scheme in SCHEMES:
        params = HgLdpParams(scheme, eps, d, k)
        server = HgLdpServer(params)
        server.warm_up(warm)
        client = make_client(params)
        client.update_state(server.start_statistics())
        client_rate = rate(client.encode, stream, args.repeats)
        server_seconds = 0.0
        perf = time.perf_counter
        for v in stream:  # the loop of the sequential simulation; only the server's part is timed
            t0 = perf()
            state = server.public_state()
            t1 = perf()
            client.update_state(state)
            report = client.encode(v)
            t2 = perf()
            server.add(report)
            server_seconds += (t1 - t0) + (perf() - t2)
        print(f"hg-{scheme:<5} {client_rate:>14,.0f} {len(stream) / server_seconds:>12,.0f}")
    oracles: list[tuple[str, LocalRandomiser]] = [
        ("grr", GeneralizedRandomizedResponse(eps, d)),
        ("olh", OptimisedLocalHashing(eps, d)),
        ("hr", HadamardResponse(eps, d)),
    ]
    for name, oracle in oracles:
        print(f"{name:<8} {rate(oracle.encode, stream, args.repeats):>14,.0f} {'':>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
