"""The operators' Flink metrics (issue 26, point 3) are visible through Flink's REST API.

A real heavy-hitters job runs (unbounded, over the session's shared stream ``hh_stream``) on a
MiniCluster whose REST port is known, and the test reads the ``privstream`` metric group of every
vertex (``/jobs/<id>/vertices/<vid>/metrics?get=...``) until the values match the known stream:
every produced event counted, the one malformed message dead-lettered, every shard epoch closed,
three releases and no refusal, ε = 1 spent (parallel epochs), and some state. It polls the REST API
with a timeout (PyFlink ships a Python operator's metrics to the JVM when a bundle ends)."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from urllib.parse import quote

import pytest
from privstream.operators.metrics import DESCRIPTIONS

from tests.flink_fixtures import (
    ProducedStream,
    fresh_name,
    job_config,
    rest_get,
    seeded,
    start_job,
)

pytestmark = [pytest.mark.flink, pytest.mark.kafka]


def privstream_metrics(port: int, job_id: str) -> dict[str, int]:
    """Every ``privstream`` metric of the job, summed over its vertices and subtasks (REST ids are
    ``<subtask>.<operator>.privstream.<name>``)."""
    totals: dict[str, int] = {}
    for vertex in rest_get(port, f"/jobs/{job_id}")["vertices"]:
        base = f"/jobs/{job_id}/vertices/{vertex['id']}/metrics"
        ids = [m["id"] for m in rest_get(port, base) if ".privstream." in m["id"]]
        if not ids:
            continue
        # "+" (in "release + ledger") must be escaped; escaped brackets are not found (measured)
        query = ",".join(quote(i, safe="()") for i in ids)
        for metric in rest_get(port, f"{base}?get={query}"):
            name = metric["id"].rsplit(".privstream.", 1)[1]
            totals[name] = totals.get(name, 0) + int(float(metric["value"]))
    return totals


def test_operator_metrics_count_the_stream(hh_stream: ProducedStream) -> None:
    from privstream.connectors.clients import free_port

    prefix, port = fresh_name("metrics"), free_port()
    flink_conf = (("rest.port", str(port)),)
    config = replace(
        job_config(hh_stream, prefix, flink_conf=flink_conf), stop_at_end_markers=False
    )  # unbounded: the MiniCluster (and its REST API) stays up after the EndMarkers closed every epoch
    epoch = 8000
    expected = {
        "eventsCounted": len(hh_stream.items),
        "deadLettered": sum(hh_stream.malformed.values()),
        "epochsClosed": sum(
            math.ceil(sum(map(len, batches)) / epoch) for batches in hh_stream.batches.values()
        ),
        "releases": max(math.ceil(sum(map(len, batches)) / epoch) for batches in hh_stream.batches.values()),
        "refusals": 0,  # (a counter never incremented is not reported: 0)
        "epsilonSpentMicros": 1_000_000,  # ε = 1 per epoch, disjoint epochs compose in parallel
    }
    client = start_job(config, seeded(prefix))
    job_id = str(client.get_job_id())
    seen: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            seen = privstream_metrics(port, job_id)
            if {name: seen.get(name, 0) for name in expected} == expected:
                break
            time.sleep(0.5)  # a REST poll interval, not a wait for the job
    finally:
        client.cancel().result()
    assert {name: seen.get(name, 0) for name in expected} == expected, seen
    assert seen["stateBytes"] > 0
    assert set(seen) <= set(DESCRIPTIONS)  # fixed names only: no data in a metric name
