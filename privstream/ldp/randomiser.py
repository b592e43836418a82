"""The local-randomiser interface and the report type (the only thing an LDP client sends).

An :class:`LdpReport` holds the scheme name, its public parameters, the public state version and
digest the client randomised against (HG-LDP; 0 and empty for stateless schemes) and the
randomised payload. It is
built only by a randomiser's :meth:`LocalRandomiser.encode`; it never contains the raw value, and
transport code (``privstream.connectors.ldp_producer``) accepts nothing else.

An :class:`LdpReportBatch` is many reports of one randomiser against one public state (the Avro
``LdpReportBatch`` message): the shared header once, then the ``count`` payloads concatenated at the
scheme's fixed width, in submission order. It is built only by
:meth:`LocalRandomiser.encode_many`, one independent randomisation per value; :meth:`LdpReportBatch.reports`
gives back exactly the reports one :meth:`~LocalRandomiser.encode` call each would have sent (with
the batch's time).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class LdpReport:
    """One locally randomised report."""

    scheme: str
    parameters: tuple[tuple[str, str], ...]  #: sorted (name, value) pairs, public
    payload: bytes  #: scheme-specific randomised output
    state_version: int = 0
    report_time_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    #: HG-LDP: the digest of the state the client randomised against (hg_state.state_digest)
    state_digest: bytes = b""

    def __post_init__(self) -> None:
        if not isinstance(self.payload, bytes):
            raise TypeError(f"payload: expected bytes, got {type(self.payload).__name__}")
        if not isinstance(self.state_digest, bytes):
            raise TypeError(f"state_digest: expected bytes, got {type(self.state_digest).__name__}")
        if not isinstance(self.scheme, str) or not self.scheme:
            raise ValueError(f"scheme: expected a non-empty str, got {self.scheme!r}")

    @property
    def parameter_map(self) -> dict[str, str]:
        return dict(self.parameters)

    @staticmethod
    def canonical_parameters(parameters: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((str(k), str(v)) for k, v in parameters.items()))


def pack_outputs(outputs: np.ndarray, width: int) -> bytes:
    """Output indices (non-negative, below ``256**width``) as ``width``-byte big-endian payloads,
    concatenated (the single report's payload encoding, once per report)."""
    if width > 8:  # a domain beyond 2**64 values: Python ints
        return b"".join(int(y).to_bytes(width, "big") for y in outputs.tolist())
    wide = np.asarray(outputs, dtype=">u8").view(np.uint8).reshape(-1, 8)
    return wide[:, 8 - width :].tobytes()


def unpack_outputs(payloads: bytes, width: int) -> list[int]:
    """The output indices of ``len(payloads) // width`` concatenated ``width``-byte big-endian
    payloads (the inverse of :func:`pack_outputs`; ``len(payloads)`` must be a multiple of ``width``)."""
    if width > 8:
        return [int.from_bytes(payloads[i : i + width], "big") for i in range(0, len(payloads), width)]
    narrow = np.frombuffer(payloads, dtype=np.uint8).reshape(-1, width)
    wide = np.zeros((narrow.shape[0], 8), dtype=np.uint8)
    wide[:, 8 - width :] = narrow
    return wide.view(">u8").ravel().tolist()


@dataclass(frozen=True)
class LdpReportBatch:
    """``count`` locally randomised reports of one randomiser against one public state (see the
    module docstring); ``payloads`` is their fixed-width payloads concatenated in submission order."""

    scheme: str
    parameters: tuple[tuple[str, str], ...]
    payloads: bytes
    count: int
    state_version: int = 0
    report_time_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    state_digest: bytes = b""

    def __post_init__(self) -> None:
        if not isinstance(self.payloads, bytes) or not isinstance(self.state_digest, bytes):
            raise TypeError("payloads, state_digest: expected bytes")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"count: a batch holds at least one report, got {self.count!r}")
        if len(self.payloads) % self.count:
            raise ValueError(
                f"payloads: {len(self.payloads)} bytes are not {self.count} payloads of one width"
            )
        if not isinstance(self.scheme, str) or not self.scheme:
            raise ValueError(f"scheme: expected a non-empty str, got {self.scheme!r}")

    @property
    def width(self) -> int:
        """Bytes per payload."""
        return len(self.payloads) // self.count

    def outputs(self) -> list[int]:
        """The reports' output indices (big-endian payloads), in order."""
        return unpack_outputs(self.payloads, self.width)

    def reports(self) -> Iterator[LdpReport]:
        """The batch's reports, in order, each as the single report it stands for."""
        w = self.width
        for i in range(self.count):
            yield LdpReport(
                self.scheme,
                self.parameters,
                self.payloads[i * w : (i + 1) * w],
                state_version=self.state_version,
                report_time_ms=self.report_time_ms,
                state_digest=self.state_digest,
            )


class FrequencyAggregator(ABC):
    """Server side: collects reports of one randomiser and estimates item frequencies."""

    @property
    @abstractmethod
    def n(self) -> int:
        """Reports aggregated."""

    @abstractmethod
    def add(self, report: LdpReport) -> None:
        """Aggregate one report (raises ValueError if it is from a different randomiser)."""

    def add_all(self, reports: Iterable[LdpReport]) -> None:
        for report in reports:
            self.add(report)

    @abstractmethod
    def estimate(self) -> np.ndarray:
        """Unbiased frequency estimate for every domain index (float64)."""


class LocalRandomiser(ABC):
    """Client side: ``encode(value)`` randomises locally and returns the report to send."""

    scheme: ClassVar[str]

    @property
    @abstractmethod
    def parameters(self) -> dict[str, str]:
        """Public parameters that identify this randomiser (sent with every report)."""

    @abstractmethod
    def encode(self, value: Any) -> LdpReport:
        """Randomise ``value`` on the client; the report never holds ``value`` itself."""

    def encode_many(self, values: Sequence[Any] | np.ndarray) -> LdpReportBatch:
        """Randomise every value on the client, independently and in order, into one batch. This
        default calls :meth:`encode` once per value (the GRR and HG-LDP randomisers vectorise it)
        and requires one state and one payload width for all. An array is read as its Python
        values (an integer array's items are ints, as :meth:`encode` expects)."""
        reports = [self.encode(v) for v in (values.tolist() if isinstance(values, np.ndarray) else values)]
        if not reports:
            raise ValueError("values: a batch needs at least one value")
        first = reports[0]
        header = (first.scheme, first.parameters, first.state_version, first.state_digest, len(first.payload))
        if any(
            (r.scheme, r.parameters, r.state_version, r.state_digest, len(r.payload)) != header
            for r in reports
        ):
            raise ValueError("values: the reports differ in state or payload width; send them one by one")
        return LdpReportBatch(
            first.scheme,
            first.parameters,
            b"".join(r.payload for r in reports),
            len(reports),
            state_version=first.state_version,
            state_digest=first.state_digest,
        )

    @abstractmethod
    def new_aggregator(self) -> FrequencyAggregator:
        """A server-side aggregator for this randomiser's reports."""

    def accepts(self, report: LdpReport) -> bool:
        """True if ``report`` was produced by a randomiser with this scheme and these parameters."""
        return (
            isinstance(report, LdpReport)
            and report.scheme == self.scheme
            and report.parameters == LdpReport.canonical_parameters(self.parameters)
        )
