"""The HG-LDP server (Li et al., arXiv 2311.16062, Alg. 9) in a user's own PyFlink pipeline.

:func:`private_ldp_heavy_hitters` takes the user's stream of client reports — each randomised on
the client by the scheme's randomiser (:func:`privstream.ldp.make_client`), as an
:class:`~privstream.ldp.LdpReport` or an :class:`~privstream.ldp.randomiser.LdpReportBatch`
(``encode_many``: many reports against one state), or as the Avro ``LdpReport`` /
``LdpReportBatch`` message that ``privstream produce --ldp`` and
:class:`~privstream.connectors.ldp_producer.LdpProducer` write to Kafka — and returns :class:`PrivateLdpHeavyHitters`: the ``LdpRelease`` dicts (the debiased top-k of the
heavy part, one per ``epoch_reports`` applied reports), the public states the clients must follow
(:class:`~privstream.ldp.PublicState`, a new version every ``state_every`` reports when it changed),
and the rejected reports with their reasons.

The privacy guarantee is local: every report is ε-LDP on its client, so everything the server does
is post-processing — no ledger, no noise drawn for privacy. Relation: any two items of one report
(one client's item at one time), every other client's input unchanged (``LdpRelease.neighbour_relation``);
the public warm-up items are not covered (``warm_up_items`` in each release). The server itself is
the ``ldp-heavy-hitters`` job's: :class:`~privstream.operators.ldp_operator.LdpServerFunction` over
:class:`~privstream.operators.ldp_logic.LdpServerLogic`, one server in keyed state (one key), its
decays drawn from the settings' secret key (:attr:`LdpServerSettings.noise_key`) and the report count, so a
replay after a restore redraws them identically.

Before the first report, give the clients the server's state version 0
(``settings.initial_server().public_state()``): the job publishes it before starting; here the
caller does, and the ``states`` stream carries every later version (and re-announces the latest on
the first report after a start or restore). Reports randomised against a version the server no
longer holds (more than ``max_lag`` versions old) or against another server run are rejected.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pyflink.common import Row, Types
from pyflink.datastream import DataStream

from privstream.connectors.avro_codec import decode, encode
from privstream.connectors.ldp_producer import batch_to_record, report_to_record
from privstream.connectors.ldp_state import state_from_record
from privstream.flink.streams import PICKLED, check_argument
from privstream.ldp import LdpReport
from privstream.ldp.randomiser import LdpReportBatch
from privstream.operators.kafka_io import BYTES, SOURCE_ROW
from privstream.operators.ldp_logic import LdpServerSettings
from privstream.operators.ldp_operator import STATE, LdpServerFunction
from privstream.operators.shard_operator import DEAD_LETTERS, Rejected

#: what the rejected reports' dead-letter records name as their source
SOURCE = "privstream.flink.private_ldp_heavy_hitters"


class PrivateLdpHeavyHitters(NamedTuple):
    """What :func:`private_ldp_heavy_hitters` adds to the graph."""

    releases: DataStream  #: LdpRelease dicts, one per epoch_reports applied reports
    states: DataStream  #: PublicState versions the clients must follow (publish them to the clients)
    rejected: DataStream  #: Rejected(element=the report's message bytes, reason): reports not applied


def _report_message(report: LdpReport | LdpReportBatch) -> bytes:
    """``report`` as the Avro ``LdpReport`` or ``LdpReportBatch`` message the LDP producer writes."""
    if isinstance(report, LdpReportBatch):
        return encode("LdpReportBatch", batch_to_record(report))
    return encode("LdpReport", report_to_record(report))


def _as_row(element: Any) -> Row:
    """A report (or batch) element as the server operator's input row ``(payload, partition,
    offset)``; the partition and offset (-1: not from Kafka) only fill a dead-letter record (a
    batch decoded once and applied report by report: :mod:`privstream.operators.ldp_logic`)."""
    if isinstance(element, LdpReport | LdpReportBatch):
        element = _report_message(element)
    payload = bytes(element) if isinstance(element, bytes | bytearray) else repr(element).encode()
    return Row(payload, -1, -1)


def _rejected(message: Any) -> Rejected:
    record = decode(bytes(message))[1]
    return Rejected(record["original_value"], record["error"])


def private_ldp_heavy_hitters(
    reports: DataStream, settings: LdpServerSettings, *, name: str = "hg-ldp server"
) -> PrivateLdpHeavyHitters:
    """The HG-LDP server of ``settings`` (scheme, ε, d, k, deployment, public warm-up, cadence;
    validated when built, naming the parameter) over ``reports``; see the module docstring."""
    check_argument("reports", reports, isinstance(reports, DataStream), "a pyflink DataStream")
    check_argument("settings", settings, isinstance(settings, LdpServerSettings), "an LdpServerSettings")
    rows = reports.map(_as_row, output_type=SOURCE_ROW).name(f"{name}: reports")
    releases = (
        rows.key_by(lambda _: 0, key_type=Types.INT())  # one server
        .process(LdpServerFunction(settings, SOURCE), output_type=BYTES)
        .name(f"{name}: HG-LDP server (one key)")
        .disable_chaining()  # see privstream.flink.streams.SIDE_OUTPUT_LEAK
    )
    return PrivateLdpHeavyHitters(
        releases.map(lambda m: decode(bytes(m))[1], output_type=PICKLED).name(f"{name}: releases"),
        releases.get_side_output(STATE)
        .map(lambda row: state_from_record(decode(bytes(row[1]))[1]), output_type=PICKLED)
        .name(f"{name}: public states"),
        releases.get_side_output(DEAD_LETTERS).map(_rejected, output_type=PICKLED).name(f"{name}: rejected"),
    )
