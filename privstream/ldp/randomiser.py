"""The local-randomiser interface and the report type (the only thing an LDP client sends).

An :class:`LdpReport` holds the scheme name, its public parameters, the public state version and
digest the client randomised against (HG-LDP; 0 and empty for stateless schemes) and the
randomised payload. It is
built only by a randomiser's :meth:`LocalRandomiser.encode`; it never contains the raw value, and
transport code (``privstream.connectors.ldp_producer``) accepts nothing else.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
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
