"""The Flink-free logic of the ``ldp-heavy-hitters`` job: one HG-LDP server over Kafka messages.

:class:`LdpServerLogic` takes the raw bytes of ``ldp-reports`` messages and returns what the
operator emits: dead letters (undecodable, stale-state, digest-mismatched, inconsistent or foreign
reports, with the reason), the public state (``HgLdpState``, keyed by the deployment: every
``state_every`` applied reports if it changed, and re-announced as described below) and, every
``epoch_reports`` applied reports, an ``LdpRelease`` with the debiased top-k (paper Algorithm 9),
ε, δ = 0, the local-DP neighbour relation and the size of the raw warm-up inside the estimates. Its whole state — the HG-LDP server
(heavy and light parts, debiasing bookkeeping, state history) and the epoch counters — is
:meth:`LdpServerLogic.to_bytes` (pickle); the operator checkpoints it as two states, the kept state
versions (:meth:`~LdpServerLogic.versions_bytes`, compact, rewritten only when a version is made)
and the rest (:meth:`~LdpServerLogic.core_bytes`), both written after every message with an output
and at least every 64 messages (:mod:`privstream.operators.ldp_operator`).

Warm-up (paper §6.1) is public prior data given in the settings; its ED decays are drawn from a
*public* seed (``SeededRandomSource("hg-ldp-warm-up:<deployment>")``: the data is raw and public,
so the draws protect nothing), so the launcher computes the same initial state, version 0, and
publishes it before the job starts (clients need it to send anything).

**Report batches.** A message is either one ``LdpReport`` or an ``LdpReportBatch`` (many reports
of one client process against one public state, in submission order: ``LdpProducer.submit_many``).
A batch is decoded once and checked once (scheme, parameters, payload width, and the state it
names: :meth:`HgLdpServer.batch_outputs`); its reports are then applied one by one, in order, with
exactly the single-report path's steps (the HeavyGuardian insert is sequential per report), and
the state is written at most once per message (the operator's ``core_bytes``). The cadence is per applied
report, not per message: a state is due when the applied count reaches a multiple of
``state_every`` and a release when it reaches a multiple of ``epoch_reports``, also in the middle
of a batch, so a batch may cross several epochs and its outputs come in report order. Hence the
releases and states made from a batched stream equal those made from the same reports sent one per
message (tests/test_ldp_batches.py checks it). Only the re-announcement rule below is evaluated
once per message. **Refusals in a batch** (the dead-letter policy):

* the whole batch is one dead letter — the original message bytes, the reason, nothing of it
  applied — when the message is undecodable, of another schema, or the batch as a whole is
  refused: another scheme or parameters, payloads that are not ``count`` payloads of the scheme's
  width, or a state it names that this run does not hold when the batch starts (unknown, too old,
  digest mismatch: every report of the batch names it and none could be applied first, so each
  would be refused for the same reason). All its reports count as refused;
* a report refused on its own inside an accepted batch (an output outside the domain, an output
  the named state makes impossible — ``inconsistent`` —, or the named state dropping out of the
  ``max_lag`` kept versions while the batch is applied) gets its own dead letter whose value is the
  original batch bytes and whose reason starts ``report <i> of <count> in the batch:`` (i from 0),
  so the report is recoverable from the bytes and the index; the batch's other reports are applied.

Statistics-phase decays are *replay-stable*: report number n draws them from
``KeyedRandomSource(noise_key, "<deployment>:n")``, a DRBG keyed by a secret the launcher drew from
the OS CSPRNG (it travels in the job graph and then in the checkpointed state, like the
heavy-hitters job's noise key). The context is the report's number n, also inside a batch (not the
batch's first number): the decays are a function of the checkpointed state and of the sequence of
reports only, never of how they were grouped into messages, so a replay after a restore is the
same whichever batching the clients used, and a batched stream gives the releases of the same
reports one per message. (A source is a few bytes until it draws: building one per report costs
≈ 1 µs; the 4 KB SHAKE block is computed only for reports that decay.) After a restore the server is the checkpoint's, and it applies the
replayed reports with the same decays *for the same sequence of reports*. What is replayed is not
always the same sequence: with a reports topic of several partitions (``privstream broker`` makes
``ldp-reports`` with 4) the source's interleaving after a restore may differ from the failed
attempt's, so the replay may make other versions, states and releases than the aborted attempt
did (which the embedded broker, tansu, still shows to ``read_committed`` readers:
docs/stack-facts.md). What holds: the committed output is consistent with the committed state
(every committed release and state follows from the committed reports applied to the checkpoint's
server), and a report randomised against a state of the aborted attempt is applied only if the
replay published that very state (same run, version and contents: its digest,
:mod:`privstream.ldp.hg_state`); otherwise it is dead-lettered ("state digest mismatch", or
"stale-state (unknown)" for a version the replay never made), never mixed in. With one partition
the replay is the same sequence, and an aborted release equals its committed replay (same epoch and items; readers keep one per epoch).

**Re-announcing the state (liveness).** Clients follow the deployment's *latest record* on the
state topic. If that record is a state this run does not hold (an aborted attempt's, or a later
state of the run committed after the savepoint a restore started from) and the replay makes no
new version, every report is refused, the applied count never reaches the cadence and nothing
would be published again: a permanent stall. So the logic re-emits its latest state version (the
one last made; never a new version, so the versions made stay those of a run without
re-announcements) (1) on the first message it processes after it was built, i.e. at the start and
after every restore, whatever that message's outcome, and (2) after every ``state_every`` refused
reports since it last emitted a state. Both are functions of the checkpointed state (the refusal
count is in it) and of the input, so the same replay emits the same records (exactly once holds;
only ``published_time`` differs).

The state of a server run is bound to its run id (``run_id``: drawn per submission like the noise
key, checkpointed in the kept versions; a restore keeps the checkpoint's). A restore whose settings
differ from the checkpoint's server (scheme, ε, α, d, k, λ_l, b, ``max_lag``, deployment or the
warm-up) is refused naming the options (:class:`RestoredSettingsError`): the server would otherwise
keep its own parameters while clients randomise with the new ones, and every report would be
refused. ``epoch_reports`` and ``state_every`` only set the cadence and may change on a restore.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from privstream.connectors.avro_codec import AvroDecodeError, decode, encode
from privstream.connectors.ldp_producer import batch_from_record, report_from_record
from privstream.connectors.ldp_state import state_to_record

from privstream.ldp import HgLdpParams, HgLdpServer, PublicState, refusal_reason
from privstream.ldp.hg_params import LDP_DELTA, LDP_NEIGHBOUR_RELATION, Scheme, alpha_argument
from privstream.ldp.hg_state import StateHistory, new_run_id
from privstream.noise.rng import KeyedRandomSource, SeededRandomSource, default_source, new_noise_key
from privstream.options import Alternative, option
from privstream.validation import check_int, check_privacy_bound

Output = tuple[Literal["release", "state", "dead-letter"], bytes]
PRIVACY_UNIT = "one report (event-level local DP; a user sending T reports gets T·ε)"


class RestoredSettingsError(ValueError):
    """A checkpoint restored with other settings than its server was started with."""


def _warm_up_file(path: str, option: str, _args: argparse.Namespace) -> tuple[int, ...]:
    """``--warm-up FILE``: one public item index per line."""
    with open(path, encoding="utf-8") as handle:
        try:
            return tuple(int(line) for line in handle if line.strip())
        except ValueError:
            raise ValueError(f"{option}: {path} must hold one integer item index per line") from None


def _warm_up_normal(text: str, option: str, args: argparse.Namespace) -> tuple[int, ...]:
    """``--warm-up-normal N``: N items of the public Normal generator (seed 0) on ``--domain``."""
    from privstream.datagen import normal_items

    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{option}: expected a number of items, got {text!r}") from None
    return tuple(int(v) - 1 for v in normal_items(n, domain=args.domain_size, seed=0))


@dataclass(frozen=True)
class LdpServerSettings:
    """The job's public settings (validated on construction: bad values name the option)."""

    epsilon: float = field(metadata=option("ε per report (event-level LDP)", kind=float))
    domain_size: int = field(metadata=option("d: items are the indices 0..d-1", name="--domain", kind=int))
    deployment: str = field(metadata=option("id shared with the clients (state topic key)"))
    warm_up: tuple[int, ...] = field(
        metadata=option(
            "file of public warm-up item indices, one per line",
            parse=_warm_up_file,
            metavar="FILE",
            alternatives=(
                Alternative(
                    "--warm-up-normal",
                    "N warm-up items of the Normal generator (seed 0) on the domain",
                    _warm_up_normal,
                    metavar="N",
                ),
            ),
        )
    )
    scheme: Scheme = field(
        default="cnr",
        kw_only=True,
        metadata=option("the HG-LDP scheme", choices=("bgr", "dsr", "bdr", "cnr")),
    )
    k: int = field(default=20, kw_only=True, metadata=option("top-k = heavy cells λ_h", kind=int))
    alpha: Fraction = field(
        default=Fraction(1, 3), kw_only=True, metadata=option("BDR/CNR: ε₁/ε", kind=alpha_argument)
    )
    light_cells: int | None = field(
        default=None, kw_only=True, metadata=option("CNR: λ_l", kind=int, default_text="5")
    )
    epoch_reports: int = field(
        default=1000, kw_only=True, metadata=option("release every N applied reports", kind=int)
    )
    state_every: int = field(
        default=100, kw_only=True, metadata=option("publish the state every N reports", kind=int)
    )
    max_lag: int = field(
        default=1024, kw_only=True, metadata=option("state versions a report may lag", kind=int)
    )
    noise_key: bytes = field(default_factory=new_noise_key, repr=False)  #: secret, per submission
    run_id: bytes = field(default_factory=new_run_id)  #: public, per submission (state digests)

    def __post_init__(self) -> None:
        check_privacy_bound("--epsilon", self.epsilon, "epsilon")  # first: the option named, one line
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

    def identity(self) -> dict[str, str]:
        """What a restored server must have been started with, by option name (the parameters of
        the paper's server — scheme, ε with its split α, d, λ_h = k, λ_l, b — the kept versions,
        the deployment and a SHA-256 of the warm-up)."""
        p = self.params
        warm = hashlib.sha256(b",".join(str(v).encode() for v in self.warm_up)).hexdigest()[:16]
        out = {
            "--scheme": p.scheme,
            "--epsilon": str(Fraction(p.epsilon)),  # exact (compared); shown with its float
            "--domain": str(p.domain_size),
            "--k": str(p.k),
            "--light-cells": str(p.light_cells),
            "decay_base": str(p.decay_base),
            "--max-lag": str(self.max_lag),
            "--deployment": self.deployment,
            "--warm-up": f"{len(self.warm_up)} items, sha256 {warm}",
        }
        if p.scheme in ("bdr", "cnr"):
            out["--alpha"] = str(p.alpha)
        return out

    def initial_server(self) -> HgLdpServer:
        """The server after the public warm-up (deterministic), statistics started (version 0)."""
        server = HgLdpServer(
            self.params,
            max_lag=self.max_lag,
            rng=SeededRandomSource(f"hg-ldp-warm-up:{self.deployment}"),
            run_id=self.run_id,
        )
        server.warm_up(self.warm_up)
        server.start_statistics()
        return server

    def state_message(self, server: HgLdpServer, state: PublicState | None = None) -> tuple[bytes, bytes]:
        """(key, value) of ``state`` (default: the server's current public state, made a new
        version if it changed) on the state topic."""
        record = state_to_record(
            server.public_state() if state is None else state,
            deployment=self.deployment,
            scheme=server.scheme,
            parameters=self.params.public,
        )
        return self.deployment.encode(), encode("HgLdpState", record)


def _shown(option: str, value: str | None) -> str | None:
    """An identity value as a refusal shows it: ε as its float (repr) and the exact fraction compared
    (``0.1 (= 3602879701896397/36028797018963968)``)."""
    if option != "--epsilon" or value is None:
        return value
    return f"{float(Fraction(value))!r} (= {value})"


class LdpServerLogic:
    """See the module docstring."""

    def __init__(
        self, settings: LdpServerSettings, state: bytes | None = None, *, versions: bytes | None = None
    ) -> None:
        """A fresh server, or the one of ``state``: :meth:`to_bytes`, or :meth:`core_bytes` with
        ``versions`` = :meth:`versions_bytes` (the operator keeps the two in separate states)."""
        self.settings = settings
        self.announce = True  # re-emit the latest state on the first message (module docstring)
        self.refused = 0  # reports refused since the last state emitted (checkpointed)
        if state is None:
            self.server = settings.initial_server()
            self.epoch = 0
            self.published = self.server.public_state().version
            self.noise_key = settings.noise_key
            self.identity = settings.identity()
            return
        if versions is None:
            state, versions = pickle.loads(state)
        core = pickle.loads(state)
        if len(core) == 5:  # a checkpoint from before the refusal count: none counted yet
            core = (*core, 0)
        if len(core) != 6:
            raise RestoredSettingsError("restore: a checkpoint of an older version of this job; start afresh")
        # the key and the run id in the state win: a savepoint restored by a new submission replays
        # the same decays and keeps its state digests
        self.server, self.epoch, self.published, self.noise_key, self.identity, self.refused = core
        self.server.history = StateHistory.from_bytes(versions)
        given = settings.identity()
        differ = sorted(
            k for k in given.keys() | self.identity.keys() if given.get(k) != self.identity.get(k)
        )
        if differ:
            raise RestoredSettingsError(
                "restore: the checkpoint's server was started with other settings; restore with its "
                "settings or start a new deployment: "
                + "; ".join(
                    f"{k} {_shown(k, self.identity.get(k))} in the checkpoint, {_shown(k, given.get(k))} given"
                    for k in differ
                )
            )

    @property
    def latest_version(self) -> int:
        latest = self.server.history.latest
        return -1 if latest is None else latest.version

    def core_bytes(self) -> bytes:
        """The server without its state history and random source, and the counters: changes with
        every report. The random source (a keyed DRBG with a 4 KB buffer, ≈ 70 % of the bytes) is
        left out: :meth:`process` replaces it before every report it applies and nothing else
        draws from it, so a restored server holds the CSPRNG until its first report."""
        server, history, rng = self.server, self.server.history, self.server.rng
        server.history = None  # type: ignore[assignment]
        server.use_rng(default_source())
        try:
            state = (server, self.epoch, self.published, self.noise_key, self.identity, self.refused)
            return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            server.history = history
            server.use_rng(rng)

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
        out = self._process(value, partition, offset, topic)
        if self.refused >= self.settings.state_every:
            self.announce = True  # clients may follow a state this run does not hold
        if self.announce and not any(kind == "state" for kind, _ in out):
            out.insert(0, self._state(self.server.history.latest))  # no new version
        self.announce = False
        return out

    def _state(self, state: PublicState | None = None) -> Output:
        """The state message of ``state`` (default: the current one, a new version if it changed)."""
        self.refused = 0
        message = self.settings.state_message(self.server, state)[1]
        self.published = self.server.history.latest.version  # type: ignore[union-attr]
        return "state", message

    def _process(self, value: bytes, partition: int, offset: int, topic: str) -> list[Output]:
        try:
            schema, record = decode(value)
        except AvroDecodeError as exc:
            return [self._dead_letter(value, f"AvroDecodeError: {exc.reason}", partition, offset, topic)]
        if schema == "LdpReportBatch":
            return self._process_batch(record, value, partition, offset, topic)
        if schema != "LdpReport":
            return [
                self._dead_letter(value, f"rejected: not an LdpReport ({schema})", partition, offset, topic)
            ]
        self._use_report_source()
        try:
            self.server.add(report_from_record(record))
        except ValueError as exc:  # StaleStateError and InconsistentReportError included
            self.refused += 1
            return [self._dead_letter(value, refusal_reason(exc), partition, offset, topic)]
        out: list[Output] = []
        self._cadence(out)
        return out

    def _use_report_source(self) -> None:
        """The next report's decays: ``KeyedRandomSource(noise_key, "<deployment>:n")`` (module
        docstring: replay-stable, independent of how reports are grouped into messages)."""
        self.server.use_rng(KeyedRandomSource(self.noise_key, f"{self.settings.deployment}:{self.server.n}"))

    def _cadence(self, out: list[Output]) -> None:
        """After one applied report: the state every ``state_every`` reports (if it changed), the
        release every ``epoch_reports``."""
        n = self.server.n
        if n % self.settings.state_every == 0 and self.server.public_state().version != self.published:
            out.append(self._state())
        if n % self.settings.epoch_reports == 0:
            self.epoch += 1
            out.append(("release", self.release()))

    def _process_batch(
        self, record: dict[str, Any], value: bytes, partition: int, offset: int, topic: str
    ) -> list[Output]:
        """An ``LdpReportBatch``: refused whole, or applied report by report (module docstring)."""
        out: list[Output] = []

        def refused(reason: str) -> None:
            self.refused += 1
            out.append(self._dead_letter(value, reason, partition, offset, topic))

        try:
            self.server.add_batch(
                batch_from_record(record),
                refused=refused,
                before=self._use_report_source,
                applied=lambda: self._cadence(out),
            )
        except ValueError as exc:  # refused whole (StaleStateError and StateDigestError included)
            count = record.get("count")
            self.refused += count if isinstance(count, int) and count > 0 else 1
            return [self._dead_letter(value, f"batch: {refusal_reason(exc)}", partition, offset, topic)]
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
            "delta": LDP_DELTA,
            "neighbour_relation": LDP_NEIGHBOUR_RELATION,
            "privacy_unit": PRIVACY_UNIT,
            "warm_up_items": server.warm_up_items,  # raw public counts inside the estimates
            "release_time": int(time.time() * 1000),
        }
        return encode("LdpRelease", record)
