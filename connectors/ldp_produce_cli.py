"""``privstream produce --ldp SCHEME``: LDP reports from the generators (the clients' side of HG-LDP).

Each generated item is randomised in this process by the scheme's client and only its report is
sent (:class:`~privstream.connectors.ldp_producer.LdpProducer`). The generators draw items in
``1..domain`` (``normal``/``exponential``, default 1,000) or ``1..universe`` (``zipf``/``gaussian``);
item ``i`` is reported as index ``i − 1`` of a domain of that size. HG-LDP schemes read the public
state of ``--deployment`` from ``--state-topic`` (a server must have published it). Reports go out
in batches of ``--batch`` (default 1,000): one ``LdpReportBatch`` message per batch, each
randomised against the latest state the producer read (refreshed between batches);
``--batch 1`` sends one ``LdpReport`` message per report, as before::

    privstream produce --ldp cnr --epsilon 1 --k 20 --deployment demo --generator normal --count 1e5
"""

from __future__ import annotations

import argparse
import sys
import time

from privstream.ldp.hg_params import alpha_argument
from privstream.validation import check_privacy_bound

LDP_SCHEMES = ("grr", "bgr", "dsr", "bdr", "cnr")


def add_ldp_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--ldp`` options of ``privstream produce``."""
    group = parser.add_argument_group("local DP (reports instead of raw events; --generator only)")
    group.add_argument(
        "--ldp", choices=LDP_SCHEMES, default=None, help="randomise each item with this scheme"
    )
    group.add_argument("--epsilon", type=float, default=1.0, help="ε per report (event-level LDP)")
    group.add_argument("--k", type=int, default=20, help="HG-LDP: top-k size = heavy cells λ_h")
    group.add_argument(
        "--alpha", type=alpha_argument, default="1/3", help="BDR/CNR: ε₁/ε (a fraction, default 1/3)"
    )
    group.add_argument("--light-cells", type=int, default=None, help="CNR: light cells λ_l (default 5)")
    group.add_argument("--deployment", default=None, help="HG-LDP: the server's deployment id")
    group.add_argument("--state-topic", default="ldp-state", help="HG-LDP: the compacted public-state topic")


def _domain_size(args: argparse.Namespace, params: dict[str, int | float]) -> int:
    name = "domain" if args.generator in ("normal", "exponential") else "universe"
    default = 1000 if name == "domain" else 25_600
    return int(params.get(name, default))


def produce_ldp(args: argparse.Namespace, params: dict[str, int | float], count: int) -> int:
    """Generate ``count`` items, randomise each locally, send the reports; returns the exit code."""
    import numpy as np
    from privstream.connectors.ldp_producer import LdpProducer
    from privstream.connectors.topics import TopicSpec, create_topics

    from privstream.datagen import generate_events
    from privstream.ldp import GeneralizedRandomizedResponse, HgLdpParams, LocalRandomiser, make_client

    check_privacy_bound("--epsilon", args.epsilon, "epsilon")  # before any client is built
    d = _domain_size(args, params)
    randomiser: LocalRandomiser
    if args.ldp == "grr":
        randomiser = GeneralizedRandomizedResponse(args.epsilon, d)
    else:
        hg = HgLdpParams(args.ldp, args.epsilon, d, args.k, alpha=args.alpha, light_cells=args.light_cells)
        randomiser = make_client(hg)
    topic = "ldp-reports" if args.topic == "events" else args.topic
    create_topics(args.bootstrap, [TopicSpec(topic, args.partitions)])
    started = time.monotonic()
    with LdpProducer(
        args.bootstrap,
        randomiser,
        topic,
        deployment=args.deployment if args.ldp != "grr" else None,
        state_topic=args.state_topic,
    ) as producer:
        for index, begin in enumerate(range(0, count, args.chunk)):
            seed = (
                None
                if args.seed is None
                else int(np.random.SeedSequence([args.seed, index]).generate_state(1)[0])
            )
            columns = generate_events(args.generator, min(args.chunk, count - begin), seed=seed, **params)
            indices = columns.items.astype(np.int64) - 1
            if args.batch == 1:
                for item in indices.tolist():
                    producer.submit(item)
            else:
                for start in range(0, indices.size, args.batch):
                    producer.submit_many(indices[start : start + args.batch])
        producer.flush()
        sent = producer.reports_sent
    print(
        f"produced {sent} {args.ldp} reports (ε = {args.epsilon:g} per report) to {topic!r} "
        f"in {time.monotonic() - started:.2f} s",
        file=sys.stderr,
    )
    return 0
