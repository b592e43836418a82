"""The Flink-free logic of the ``ldp-heavy-hitters`` job: one HG-LDP server over Kafka messages.

:class:`LdpServerLogic` takes the raw bytes of ``ldp-reports`` messages and returns what the
operator emits: dead letters (undecodable, stale-state, inconsistent or foreign reports, with the
reason), the public state (``HgLdpState``, keyed by the deployment, whenever it changed and at
least every ``state_every`` applied reports) and, every ``epoch_reports`` applied reports, an
``LdpRelease`` with the debiased top-k (paper Algorithm 9). Its whole state — the HG-LDP server
(heavy and light parts, debiasing bookkeeping, state history) and the epoch counters — is
:meth:`LdpServerLogic.to_bytes` (pickle); the operator checkpoints it as two states, the kept state
versions (:meth:`~LdpServerLogic.versions_bytes`, compact, rewritten only when a version is made)
and the rest (:meth:`~LdpServerLogic.core_bytes`, rewritten after every message).

Warm-up (paper §6.1) is public prior data given in the settings; its ED decays are drawn from a
*public* seed (``SeededRandomSource("hg-ldp-warm-up:<deployment>")``: the data is raw and public,
so the draws protect nothing), so the launcher computes the same initial state, version 0, and
publishes it before the job starts (clients need it to send anything).

Statistics-phase decays are *replay-stable*: report number n draws them from
``KeyedRandomSource(noise_key, "<deployment>:n")``, a DRBG keyed by a secret the launcher drew from
the OS CSPRNG (it travels in the job graph and then in the checkpointed state, like the
heavy-hitters job's noise key). After a restore the replayed reports therefore rebuild exactly the
same server, versions and releases: a release or state left in an aborted Kafka transaction — which
the embedded broker (tansu) still shows to ``read_committed`` readers (docs/stack-facts.md) — is
identical to its committed replay (same epoch, same items; readers keep one per epoch).
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from privstream.connectors.avro_codec import AvroDecodeError, decode, encode
from privstream.connectors.ldp_producer import report_from_record
from privstream.connectors.ldp_state import state_to_record

from privstream.ldp import HgLdpParams, HgLdpServer, refusal_reason
from privstream.ldp.hg_params import Scheme
from privstream.ldp.hg_state import StateHistory
from privstream.noise.rng import KeyedRandomSource, SeededRandomSource, new_noise_key
from privstream.validation import check_int

Output = tuple[Literal["release", "state", "dead-letter"], bytes]
PRIVACY_UNIT = "one report (event-level local DP; a user sending T reports gets T·ε)"


@dataclass(frozen=True)
class LdpServerSettings:
    """The job's public settings (validated on construction: bad values name the option)."""

    scheme: Scheme
    epsilon: float
    domain_size: int
    k: int
    deployment: str
    warm_up: tuple[int, ...]
    alpha: Fraction = Fraction(1, 3)
    light_cells: int | None = None
    epoch_reports: int = 1000
    state_every: int = 100
    max_lag: int = 1024
    noise_key: bytes = field(default_factory=new_noise_key, repr=False)  #: secret, per submission

    def __post_init__(self) -> None:
        self.params  # noqa: B018 - validates scheme, epsilon, domain_size, k, alpha, light_cells
        check_int("epoch_reports", self.epoch_reports)
        check_int("state_every", self.state_every)
        check_int("max_lag", self.max_lag, minimum=0)
        if not self.deployment:
            raise ValueError("deployment: must be a non-empty id")
        if not self.warm_up:
            raise ValueError("warm_up: the heavy part must be filled before statistics (paper §6.1)")

    @property
    def params(self) -> HgLdpParams:
        return HgLdpParams(
            self.scheme,
            self.epsilon,
            self.domain_size,
            self.k,
            alpha=self.alpha,
            light_cells=self.light_cells,
        )

    def initial_server(self) -> HgLdpServer:
        """The server after the public warm-up (deterministic), statistics started (version 0)."""
        server = HgLdpServer(
            self.params, max_lag=self.max_lag, rng=SeededRandomSource(f"hg-ldp-warm-up:{self.deployment}")
        )
        server.warm_up(self.warm_up)
        server.start_statistics()
        return server

    def state_message(self, server: HgLdpServer) -> tuple[bytes, bytes]:
        """(key, value) of the server's current public state on the state topic."""
        record = state_to_record(
            server.public_state(),
            deployment=self.deployment,
            scheme=server.scheme,
            parameters=self.params.public,
        )
        return self.deployment.encode(), encode("HgLdpState", record)


class LdpServerLogic:
    """See the module docstring."""

    def __init__(
        self, settings: LdpServerSettings, state: bytes | None = None, *, versions: bytes | None = None
    ) -> None:
        """A fresh server, or the one of ``state``: :meth:`to_bytes`, or :meth:`core_bytes` with
        ``versions`` = :meth:`versions_bytes` (the operator keeps the two in separate states)."""
        self.settings = settings
        if state is None:
            self.server = settings.initial_server()
            self.epoch = 0
            self.published = self.server.public_state().version
            self.noise_key = settings.noise_key
            return
        if versions is None:
            state, versions = pickle.loads(state)
        # the key in the state wins: a savepoint restored by a new submission replays the same
        self.server, self.epoch, self.published, self.noise_key = pickle.loads(state)
        self.server.history = StateHistory.from_bytes(versions)

    @property
    def latest_version(self) -> int:
        latest = self.server.history.latest
        return -1 if latest is None else latest.version

    def core_bytes(self) -> bytes:
        """The server without its state history, and the counters: changes with every report."""
        server, history = self.server, self.server.history
        server.history = None  # type: ignore[assignment]
        try:
            state = (server, self.epoch, self.published, self.noise_key)
            return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            server.history = history

    def versions_bytes(self) -> bytes:
        """The kept state versions (compact): change only when a new version is made."""
        return self.server.history.to_bytes()

    def to_bytes(self) -> bytes:
        return pickle.dumps((self.core_bytes(), self.versions_bytes()), protocol=pickle.HIGHEST_PROTOCOL)

    def _dead_letter(self, value: bytes, error: str, partition: int, offset: int, topic: str) -> Output:
        from privstream.connectors.dead_letter import dead_letter_record

        record = dead_letter_record(value=value, error=error, topic=topic, partition=partition, offset=offset)
        return "dead-letter", encode("DeadLetter", record)

    def process(self, value: bytes, partition: int, offset: int, topic: str) -> list[Output]:
        """One ``ldp-reports`` message → outputs (see the module docstring)."""
        try:
            schema, record = decode(value)
        except AvroDecodeError as exc:
            return [self._dead_letter(value, f"AvroDecodeError: {exc.reason}", partition, offset, topic)]
        if schema != "LdpReport":
            return [
                self._dead_letter(value, f"rejected: not an LdpReport ({schema})", partition, offset, topic)
            ]
        rng = KeyedRandomSource(self.noise_key, f"{self.settings.deployment}:{self.server.n}")
        self.server.use_rng(rng)  # replay-stable decays for this report (module docstring)
        try:
            self.server.add(report_from_record(record))
        except ValueError as exc:  # StaleStateError and InconsistentReportError included
            return [self._dead_letter(value, refusal_reason(exc), partition, offset, topic)]
        out: list[Output] = []
        n = self.server.n
        if n % self.settings.state_every == 0:
            state = self.server.public_state()
            if state.version != self.published:
                self.published = state.version
                out.append(("state", self.settings.state_message(self.server)[1]))
        if n % self.settings.epoch_reports == 0:
            self.epoch += 1
            out.append(("release", self.release()))
        return out

    def release(self) -> bytes:
        """The ``LdpRelease`` of the current top-k."""
        server = self.server
        state = server.history.latest
        record: dict[str, Any] = {
            "deployment": self.settings.deployment,
            "scheme": server.scheme,
            "epoch": self.epoch,
            "reports": server.n,
            "state_version": 0 if state is None else state.version,
            "items": [{"item": item, "estimate": value} for item, value in server.heavy_hitters()],
            "epsilon": server.params.effective_epsilon,
            "privacy_unit": PRIVACY_UNIT,
            "release_time": int(time.time() * 1000),
        }
        return encode("LdpRelease", record)
