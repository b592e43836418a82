"""The continual-monitor job's node and aggregator, free of Flink so they can be unit-tested.

Chan, Li, Shi, Xu's distributed setting: k nodes (here: the partitions of the events topic, or
the sites a producer assigns to them) each run a protocol on their own stream, and an untrusted
aggregator combines what they send. :class:`ContinualNode` is the body of the keyed node
operator: it cuts its partition into **time steps** by the producers' ``EpochWatermark``
punctuations (:class:`~privstream.operators.epochs.TimeEpochs`: a step is a tumbling event-time
epoch, closed by punctuation, never by event times), keeps the open steps' items in arrival order,
and when steps close feeds each one — empty steps included, in order — to its protocol: a PDCH-LU
node (:class:`~privstream.continual.LazyUpdateNode`, mode ``lu``) or a PDCH-BF node
(:class:`~privstream.continual.PdchBfNode`, mode ``bf``). Per closed step it emits one
``ContinualUpdate`` record for the updates topic. :class:`ContinualAggregator` is the body of the
aggregator operator, which reads that topic: it applies each node's updates and, once all k nodes
have closed step s, releases s's heavy hitters.

**Neighbour relation (event level, per node).** Steps are cut by public punctuations, so one
event's step depends only on its own event time and its position relative to the punctuations in
its partition. Replacing (or adding/removing) one event of one node's stream therefore changes
exactly one step, hence exactly one block per level of that node's PCC; Lemma 2 bounds each block's
MG ℓ1 change by β_i + 1 whatever the number of items per step, so each block release is
ε_i-DP and the node's whole transcript is ε-DP (Lemma 3, Σε_i < ε; Theorem 1 / §4.3 by
post-processing). Every node is a separate stream with its own ε: the guarantee is per node
(a change in one node's stream), as in the paper's Def. 3. The aggregator only post-processes.
Which steps a node releases is public: from its first punctuation to its last.
"""

from __future__ import annotations

import argparse
import json
import struct
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from privstream.connectors.avro_codec import AvroDecodeError, decode, encode
from privstream.connectors.dead_letter import dead_letter_record
from privstream.connectors.validation import parse_duration_ms
from privstream.operators.epochs import FINAL, ShardProgress, TimeEpochs
from privstream.operators.payloads import EventPayload, Payload, PayloadError, WatermarkPayload
from privstream.operators.test_hooks import TestHooks

from privstream.continual import PCC, LazyUpdateAggregator, LazyUpdateNode, Message
from privstream.continual.blocks import check_lambda, pcc_params
from privstream.continual.masking import Roster
from privstream.continual.pcc import heavy_hitter_bar
from privstream.continual.pdch_bf import BfMessage, PdchBfAggregator, PdchBfConfig, PdchBfNode, pdch_bf_config
from privstream.options import option
from privstream.sketches import SketchFormatError
from privstream.sketches.binary_format import decode_envelope, encode_envelope
from privstream.validation import check_privacy_bound

MODES = ("lu", "bf")
#: type bytes of the operator state records (the core's reserved state range, see state_records.py)
NODE_STATE, AGGREGATOR_STATE = 240, 241
_LEN = struct.Struct("<I")


def _ms(text: str, option: str, _args: argparse.Namespace) -> int:
    return parse_duration_ms(text, option)


class ForeignUpdate(ValueError):
    """A record on the updates topic that is not this run's: another submission's update (its
    session differs: e.g. an earlier run's leftovers, which a fresh start reads from the topic's
    beginning), another mode or node count, or no ``ContinualUpdate`` at all. The aggregator
    dead-letters it with this reason (:meth:`ContinualAggregator.take`) and applies nothing."""


@dataclass(frozen=True)
class ContinualSettings:
    """The public parameters of the continual-monitor protocol (all data-independent)."""

    epsilon: float = field(metadata=option("each node's event-level ε (whole run)", kind=float))
    lam: float = field(metadata=option("λ: the approximation (rounded down to 1/2^j)", kind=float))
    window: int = field(metadata=option("W: the window, in time steps", kind=int))
    universe: int = field(metadata=option("n: the declared universe is items 0..n-1", kind=int))
    nodes: int  #: k: the events topic's partitions (no option: read from the topic)
    theta: float = field(metadata=option("θ: release items with ≥ θ of the window", kind=float))
    mode: str = field(
        default="lu", kw_only=True, metadata=option("PDCH-LU (lazy updates) or PDCH-BF", choices=MODES)
    )
    #: a time step's event-time length
    step_ms: int = field(
        default=86_400_000,
        kw_only=True,
        metadata=option(
            "a time step's event-time length (e.g. 1d, 60s)", name="--step", parse=_ms, default_text="1d"
        ),
    )
    #: public bound on items per node per window (thresholds); None: W
    window_items: int | None = field(
        default=None,
        kw_only=True,
        metadata=option(
            "public bound on events per node per window, used in the thresholds",
            kind=int,
            default_text="W",
        ),
    )
    #: PDCH-BF: Bloom failure probability per window
    delta: float = field(
        default=1e-6, kw_only=True, metadata=option("--mode bf: Bloom failure probability", kind=float)
    )
    #: PDCH-BF: node-<i>.key files and roster.json (offline setup)
    keys_dir: str | None = field(
        default=None,
        kw_only=True,
        metadata=option("--mode bf: directory from `privstream keys`", name="--keys"),
    )
    hash_seed: str = field(default="privstream-continual-monitor", kw_only=True)  #: PDCH-BF: public
    #: the run's id ("": the launcher draws one): stamped into its updates; PDCH-BF: keeps period
    #: labels unique across runs
    session: str = field(
        default="",
        kw_only=True,
        metadata=option(
            "the run's id, stamped into its updates (other runs' updates are dead-lettered) and, with "
            "--mode bf, its period labels (default: a fresh random one, logged; give it again only to "
            "resume that run from a savepoint: --restore-from needs it)"
        ),
    )
    noise_secret: str = ""  #: hex; the nodes' noise keys derive from it ("": the launcher draws one)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--mode: expected one of {MODES}, got {self.mode!r}")
        if self.nodes < 1:
            raise ValueError(f"nodes: the events topic needs at least one partition, got {self.nodes}")
        if self.mode == "bf" and self.nodes < 2:
            raise ValueError("--mode bf: pairwise masking needs at least 2 nodes (partitions)")
        if self.mode == "bf" and not self.keys_dir:
            raise ValueError(
                "--keys: --mode bf needs the nodes' keys (`privstream keys --nodes k --out DIR`)"
            )
        if self.universe < 1:
            raise ValueError(f"--universe: must be >= 1, got {self.universe}")
        if self.step_ms < 1:
            raise ValueError(f"--step: must be >= 1 ms, got {self.step_ms} ms")
        if self.window_items is not None and self.window_items < 1:
            raise ValueError(f"--window-items: must be >= 1, got {self.window_items}")
        heavy_hitter_bar(self.theta, Fraction(0), 1)  # theta in (0, 1), named
        check_privacy_bound("--epsilon", self.epsilon, "epsilon")
        # epsilon, lam, window (and delta, k for bf): fail fast, naming the parameter
        if self.bf_config() is None:
            LazyUpdateAggregator(self.nodes, self.lam, self.window)
            PCC(self.epsilon, self.lam, self.window, self.domain, noiseless=True)
        if self.mode == "bf":
            try:
                roster = self.roster()
            except (OSError, ValueError, KeyError) as exc:
                raise ValueError(f"--keys: cannot read the roster in {self.keys_dir}: {exc}") from exc
            if roster.node_ids != tuple(range(self.nodes)):
                raise ValueError(
                    f"--keys: the roster has nodes {list(roster.node_ids)}, the events topic has "
                    f"{self.nodes} partitions (nodes 0..{self.nodes - 1}); run `privstream keys --nodes {self.nodes}`"
                )

    def with_secrets(self) -> ContinualSettings:
        """These settings with the per-run secrets drawn where unset (the launcher's job, once per
        submission): the nodes' noise secret (from the OS CSPRNG; it travels in the job graph, so
        a node that fails before its first checkpoint redraws the same noise for the same block)
        and a random session: the run's id, stamped into every ``ContinualUpdate`` (the aggregator
        dead-letters other runs' updates) and, for PDCH-BF, into the period labels (never repeated
        across submissions). To resume a run from a savepoint, pass its ``--session`` again."""
        import secrets

        from privstream.noise.rng import new_noise_key

        return replace(
            self,
            noise_secret=self.noise_secret or new_noise_key().hex(),
            session=self.session or secrets.token_hex(16),
        )

    @property
    def guaranteed_epsilon(self) -> float:
        """Each node's transcript is ε'-DP with ε' = Σ ε_i < ε (its PCC's levels; λ/11 for PDCH-LU)."""
        lam = check_lambda(self.lam) / 11 if self.mode == "lu" else self.lam
        return float(pcc_params(self.epsilon, lam, self.window).total_epsilon)

    @property
    def domain(self) -> range:
        return range(self.universe)

    @property
    def policy(self) -> TimeEpochs:
        return TimeEpochs(self.step_ms, 0)

    def bf_config(self) -> PdchBfConfig | None:
        """PDCH-BF's public parameters (None in mode lu)."""
        if self.mode != "bf":
            return None
        return pdch_bf_config(
            self.epsilon,
            self.lam,
            self.window,
            self.domain,
            self.nodes,
            self.delta,
            self.hash_seed.encode(),
            (self.session or "unset").encode(),
            window_items=self.window_items,
        )

    def noise_key(self, node: int, hooks: TestHooks | None = None) -> bytes | None:
        """Node ``node``'s PCC noise key: SHA-256 of the secret ``noise_secret`` and the node, or
        (TESTS ONLY) of ``hooks``' public ``noise_seed``; None if neither is set (a fresh key)."""
        import hashlib

        seeded = None if hooks is None else hooks.continual_noise_key(node)
        if seeded is not None:  # TESTS ONLY: a public seed
            return seeded
        if self.noise_secret:
            return hashlib.sha256(bytes.fromhex(self.noise_secret) + b":node:" + str(node).encode()).digest()
        return None

    def roster(self) -> Roster:
        data = json.loads((Path(self.keys_dir or "") / "roster.json").read_text())
        return Roster({int(i): bytes.fromhex(pk) for i, pk in data["public_keys"].items()})

    def private_key(self, node: int) -> Any:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        raw = bytes.fromhex((Path(self.keys_dir or "") / f"node-{node}.key").read_text().strip())
        return X25519PrivateKey.from_private_bytes(raw)


def write_keys(directory: str | Path, nodes: int) -> Path:
    """The offline setup of PDCH-BF (§2.5, the trusted authority): a fresh X25519 key per node
    (``node-<i>.key``, SECRET: hand each to its node only) and the public roster (``roster.json``)."""
    from privstream.continual.masking import generate_private_key, public_key_bytes

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    public = {}
    for node in range(nodes):
        key = generate_private_key()
        raw = key.private_bytes_raw()
        path = out / f"node-{node}.key"
        path.write_text(raw.hex() + "\n")
        path.chmod(0o600)
        public[str(node)] = public_key_bytes(key).hex()
    (out / "roster.json").write_text(json.dumps({"public_keys": public}, indent=1) + "\n")
    return out


def _pack(blobs: list[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(b)) + b for b in blobs)


def _unpack(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        if pos + _LEN.size > len(data):
            raise SketchFormatError("truncated continual state")
        (n,) = _LEN.unpack_from(data, pos)
        pos += _LEN.size
        if pos + n > len(data):
            raise SketchFormatError("truncated continual state")
        out.append(data[pos : pos + n])
        pos += n
    return out


class OpenSteps:
    """A node's open steps' items (int64 bytes in arrival order), kept in ``store`` as one entry per
    message and step, ``"<epoch>:<n>"`` (the n-th piece of that step): a message costs its own
    events — one new entry each — not a rewrite of its step's items so far (issue 25). Closing a
    step takes its pieces, in order, and removes them. ``store`` is a plain dict, or the operator's
    view of a Flink ``MapState`` (checkpointed: the open steps are exactly its entries)."""

    def __init__(self, store: MutableMapping[str, bytes]) -> None:
        self.store = store
        self._pieces: dict[int, int] | None = None  #: epoch -> its pieces (read from the keys once)

    def _counts(self) -> dict[int, int]:
        if self._pieces is None:
            pieces: dict[int, int] = {}
            for key in self.store:
                epoch, n = (int(part) for part in key.split(":"))
                pieces[epoch] = max(pieces.get(epoch, 0), n + 1)
            self._pieces = pieces
        return self._pieces

    def append(self, epoch: int, items: bytes) -> None:
        counts = self._counts()
        n = counts.get(epoch, 0)
        self.store[f"{epoch}:{n}"] = items
        counts[epoch] = n + 1

    def take(self, epoch: int) -> bytes:
        """The step's items (b"" if it has none), removed from the store."""
        n = self._counts().pop(epoch, 0)
        return b"".join(self.store.pop(f"{epoch}:{i}") for i in range(n))

    def epochs(self) -> list[int]:
        return sorted(self._counts())


class ContinualNode:
    """One node: time steps by punctuation, its protocol, one ``ContinualUpdate`` per closed step.

    ``protocol`` is the node protocol's state (None: new), or ``loaded`` that state restored;
    ``steps`` holds the open steps' items (:class:`OpenSteps`, or the mapping it keeps them in);
    ``progress`` its punctuation clock; ``hooks``:
    TESTS ONLY (a ``noise_seed`` makes the noise keys public and replay-stable), None in production."""

    def __init__(
        self,
        node: int,
        settings: ContinualSettings,
        protocol: bytes | None,
        steps: OpenSteps | MutableMapping[str, bytes],
        progress: ShardProgress,
        loaded: LazyUpdateNode | PdchBfNode | None = None,
        hooks: TestHooks | None = None,
    ) -> None:
        self.node = node
        self.settings = settings
        self.hooks = hooks
        self.steps = steps if isinstance(steps, OpenSteps) else OpenSteps(steps)
        self.progress = progress
        self.late_reason = ""
        self.unreleased_events = 0
        self.shard = node
        #: ``loaded``: the protocol already restored from ``protocol`` (the operator keeps it between
        #: messages instead of deserialising the state for every one)
        self._protocol = loaded if loaded is not None else self._load(protocol)

    def _load(self, data: bytes | None) -> LazyUpdateNode | PdchBfNode:
        s = self.settings
        key = s.noise_key(self.node, self.hooks)
        if s.mode == "lu":
            if data is None:
                return LazyUpdateNode(
                    s.epsilon, s.lam, s.window, s.domain, noise_key=key, window_items=s.window_items
                )
            node = LazyUpdateNode.from_bytes(data, s.domain)
            expected = pcc_params(s.epsilon, check_lambda(s.lam) / 11, s.window)
            if node.pcc.params != expected or node.window_items != s.window_items:
                raise ValueError(
                    f"node {self.node}: the restored state was built with other parameters "
                    f"({node.pcc.params}, window_items={node.window_items}); restore with the same "
                    "--epsilon, --lam, --window and --window-items, or start afresh"
                )
            return node
        if not s.session:
            raise ValueError("--session: PDCH-BF needs a session (the launcher draws one per submission)")
        config = s.bf_config()
        assert config is not None
        pcc = (
            PCC(s.epsilon, s.lam, s.window, s.domain, noise_key=key)
            if data is None
            else PCC.from_bytes(data, s.domain)
        )
        return PdchBfNode(self.node, s.private_key(self.node), s.roster(), config, pcc)

    def protocol_bytes(self) -> bytes:
        p = self._protocol
        return p.to_bytes() if isinstance(p, LazyUpdateNode) else p.pcc.to_bytes()

    def add(self, payload: Payload) -> tuple[list[bytes], int]:
        """One decoded message: a punctuation may close steps; events join their steps. Returns the
        ``ContinualUpdate`` records of the steps it closed and how many of its events were late."""
        policy = self.settings.policy
        if isinstance(payload, WatermarkPayload):
            self.progress.punctuate(payload.watermark_ms)
            return self._close_through(policy.closable_through(self.progress)), 0
        if not isinstance(payload, EventPayload):
            raise PayloadError("continual-monitor reads events (Event/EventBatch), not user sets")
        if not isinstance(payload.items, np.ndarray) or payload.items.dtype.kind not in "iu":
            raise PayloadError("continual-monitor counts integer items (the declared universe 0..n-1)")
        split = policy.split(payload, self.progress)
        self.late_reason = split.late_reason
        for epoch, piece in split.pieces:
            self.steps.append(epoch, np.asarray(piece.items, dtype=np.int64).tobytes())
        return self._close_through(policy.closable_through(self.progress)), split.late

    def finish(self) -> list[bytes]:
        """End of input: close the steps through the last punctuation; later items are not released."""
        out = self._close_through(self.settings.policy.final_through(self.progress))
        for epoch in self.steps.epochs():
            self.unreleased_events += len(self.steps.take(epoch)) // 8
        self.progress.closed_through = FINAL
        return out

    def _close_through(self, last: int | None) -> list[bytes]:
        """Feed every step closed by ``last`` to the protocol (:meth:`ShardProgress.close_through`);
        step 1 is the epoch after the first punctuation's."""
        epochs = self.progress.close_through(last)
        if epochs is None:
            return []
        first = self.progress.first_epoch
        assert first is not None
        out = []
        for epoch in epochs:
            items = np.frombuffer(self.steps.take(epoch), dtype=np.int64)
            out.append(self._step(epoch, epoch - first + 1, items))
        return out

    def _step(self, epoch: int, step: int, items: np.ndarray) -> bytes:
        p = self._protocol
        updates: list[dict[str, int]] = []
        tables: list[bytes] = []
        if isinstance(p, LazyUpdateNode):
            updates = [{"item": int(x), "value": int(c)} for x, c in p.step_items(items)]
            words = 2 * len(updates)
        else:
            messages = p.step_items(items)
            tables = [m.to_bytes() for m in messages]
            words = sum(m.words for m in messages)
        return encode(
            "ContinualUpdate",
            {
                "node": self.node,
                "epoch": epoch,
                "step": step,
                "mode": self.settings.mode,
                "updates": updates,
                "tables": tables,
                "words": words,
                "update_time": int(time.time() * 1000),
                "session": self.settings.session,
            },
        )


class ContinualAggregator:
    """The aggregator: applies every node's ``ContinualUpdate`` of a step and releases the step once
    all k nodes have closed it. State (:meth:`to_bytes`): per node its last step and words, the
    steps' epochs, the updates not yet applied, and the applied state: c_i(x) per node (lu) or the
    live masked tables (bf: replayed into a :class:`~privstream.continual.PdchBfAggregator` on
    restore)."""

    def __init__(self, settings: ContinualSettings, state: bytes | None = None) -> None:
        self.settings = settings
        k = settings.nodes
        self.closed: list[int] = [0] * k  #: the last step each node has closed
        self.epochs: dict[int, int] = {}  #: step -> its absolute epoch
        self.released = 0  #: the last step released
        self.words: list[int] = [0] * k
        self._tables: dict[tuple[int, int, int], bytes] = {}  # (level, index, node) -> BfMessage bytes
        #: (step, node) -> its update (bytes, decoded), not yet applied
        self._pending: dict[tuple[int, int], tuple[bytes, dict[str, Any]]] = {}
        self._lu = LazyUpdateAggregator(k, settings.lam, settings.window, window_items=settings.window_items)
        config = settings.bf_config()
        self._bf = None if config is None else PdchBfAggregator(settings.roster(), config)
        if state is not None:
            self._restore(state)

    def take(
        self, record: bytes, *, topic: str, partition: int, offset: int
    ) -> tuple[list[bytes], list[bytes]]:
        """:meth:`add` for the operator: ``(releases, dead letters)``. An update that is not this
        run's (:class:`ForeignUpdate`) becomes an Avro ``DeadLetter`` of the message at
        ``topic``/``partition``/``offset`` with the reason, and changes nothing."""
        try:
            return self.add(record), []
        except ForeignUpdate as exc:
            letter = dead_letter_record(
                value=record, error=str(exc), topic=topic, partition=partition, offset=offset
            )
            return [], [encode("DeadLetter", letter)]

    def _own(self, record: bytes) -> dict[str, Any]:
        """The decoded update if it is this run's; else :class:`ForeignUpdate` saying whose it is."""
        try:
            schema, value = decode(record)
        except AvroDecodeError as exc:
            raise ForeignUpdate(f"undecodable record on the updates topic: {exc.reason}") from None
        s = self.settings
        if schema != "ContinualUpdate":
            raise ForeignUpdate(f"a {schema} record on the updates topic (not a ContinualUpdate)")
        if value["session"] != s.session:
            raise ForeignUpdate(
                "an earlier run's leftover update on the updates topic, ignored: update from another "
                f"run/submission (session {value['session'] or '(none)'!r}, this run {s.session or '(none)'!r})"
            )
        if value["mode"] != s.mode:
            raise ForeignUpdate(f"update of mode {value['mode']!r}; this run is mode {s.mode!r}")
        if not 0 <= value["node"] < s.nodes:
            raise ForeignUpdate(f"update from node {value['node']}; this run has {s.nodes} nodes")
        return value

    def add(self, record: bytes) -> list[bytes]:
        """Take one ``ContinualUpdate``; returns the Avro ``Release`` records of the steps now complete.
        Nodes run ahead of each other, so a node's updates wait until every node has closed their
        step: step s is released from every node's values as of step s (applied in node order).
        A record that is not this run's raises :class:`ForeignUpdate` and changes nothing."""
        value = self._own(record)
        node, step = value["node"], value["step"]
        if step <= self.closed[node]:
            return []  # already taken (the topic is read exactly once; kept for safety)
        if step != self.closed[node] + 1:
            raise ValueError(f"node {node} skipped from step {self.closed[node]} to {step}")
        known = self.epochs.setdefault(step, value["epoch"])
        if known != value["epoch"]:
            raise ValueError(
                f"nodes disagree on the epoch of step {step} ({known} vs {value['epoch']}): their first "
                "punctuations differ; punctuate every partition from the same clock"
            )
        self._pending[(step, node)] = (record, value)
        self.closed[node] = step
        self.words[node] += value["words"]
        out = []
        while self.released < min(self.closed):
            step = self.released + 1
            for i in range(self.settings.nodes):
                self._apply(i, self._pending.pop((step, i))[1])
            self.released = step
            out.append(self._release(step))
            self.epochs.pop(step, None)
        return out

    def _apply(self, node: int, value: dict[str, Any]) -> None:
        if self._bf is None:
            self._lu.receive(node, [Message(u["item"], u["value"]) for u in value["updates"]])
            return
        for blob in value["tables"]:
            message = BfMessage.from_bytes(blob)
            self._tables[(message.block.level, message.block.index, node)] = blob
            self._bf.receive(message)

    def _release(self, step: int) -> bytes:
        s = self.settings
        if self._bf is not None:
            from privstream.continual.pdch_bf import BlockUnavailableError

            self._bf.discard_expired(step)
            self._forget_expired(step)
            try:
                counts = self._bf.estimates(step)
            except BlockUnavailableError as exc:
                return _refused(step, s, str(exc))
            lam = self._bf.config.params.lam
            guarantee_theorem = "Chan-Li-Shi-Xu §4.3 (PDCH-BF), Lemma 3 per node; Theorem 2 (Bloom)"
        else:
            counts = self._lu.counts()
            lam = check_lambda(s.lam)
            guarantee_theorem = "Chan-Li-Shi-Xu Theorem 1 (PDCH-LU), Lemma 3 per node"
        total = s.nodes * (s.window_items or s.window)
        bar = heavy_hitter_bar(s.theta, lam, total)
        items = [{"item": int(x), "count": int(c)} for x, c in sorted(counts.items()) if c >= bar]
        target = float(lam * total)
        return encode(
            "Release",
            {
                "items": items,
                "epsilon": s.guaranteed_epsilon,
                "delta": 0.0,
                "mechanism": f"pdch-{s.mode}",
                "neighbour_relation": (
                    "event level, per node: one event of ONE node's stream replaced (or added/removed); "
                    "time steps are cut by public punctuations, so the event changes one step and one "
                    "PCC block per level (Lemma 2: MG sensitivity <= beta_i + 1 for any block length); "
                    "the whole infinite transcript of each node is eps-DP (continual release: this "
                    "epsilon covers every step, not each one); a replacement that moves an event to "
                    "another node (its routing key changes) changes two nodes' streams: 2 eps"
                ),
                "privacy_unit": "one event of one node's stream (a node = a partition of the events topic)",
                "epoch": step,
                "window_start": (self.epochs[step] - s.window + 1) * s.step_ms,
                "window_end": (self.epochs[step] + 1) * s.step_ms,
                "error_bound": {
                    "below": target,
                    "above": target,
                    "beta": 1.0,
                    "sketch_term": "0",
                    "systematic": 0.0,
                    "derivation": (
                        f"{guarantee_theorem}: |c(x) - count_x| <= lambda*k*W w.p. >= 1 - delta once W >= "
                        "Theta((1/(lambda^2 eps)) log^2(1/lambda) log(...)); the paper states no constants, "
                        "so this is the target, not a certified bound (beta = 1)"
                    ),
                },
                "release_time": int(time.time() * 1000),
            },
        )

    def _forget_expired(self, step: int) -> None:
        from privstream.continual.blocks import BlockId, is_expired

        assert self._bf is not None
        params = self._bf.config.params
        for key in [k for k in self._tables if is_expired(params, BlockId(k[0], k[1]), step)]:
            del self._tables[key]

    def to_bytes(self) -> bytes:
        k = self.settings.nodes
        head = [self.released, *self.closed, *self.words, len(self._pending)]
        epochs = np.array([v for kv in sorted(self.epochs.items()) for v in kv], dtype=np.int64).tobytes()
        if self._bf is None:
            from privstream.continual.lazy_update import encode_counters

            blobs = [encode_counters(self._lu.node_values(i)) for i in range(k)]
        else:
            blobs = [self._tables[key] for key in sorted(self._tables)]
        pending = [self._pending[key][0] for key in sorted(self._pending)]
        return encode_envelope(AGGREGATOR_STATE, head, _pack([epochs, *pending, *blobs]))

    def _restore(self, data: bytes) -> None:
        k = self.settings.nodes
        head, payload = decode_envelope(data, AGGREGATOR_STATE, 2 * k + 2, "continual aggregator state")
        self.released, self.closed, self.words = head[0], list(head[1 : k + 1]), list(head[k + 1 : 2 * k + 1])
        blobs = _unpack(payload)
        pairs = np.frombuffer(blobs[0], dtype=np.int64).reshape(-1, 2)
        self.epochs = {int(s): int(e) for s, e in pairs}
        pending, blobs = blobs[1 : head[-1] + 1], blobs[head[-1] + 1 :]
        for record in pending:
            value = decode(record)[1]
            self._pending[(value["step"], value["node"])] = (record, value)
        if self._bf is None:
            from privstream.continual.lazy_update import decode_counters

            for node, blob in enumerate(blobs):
                self._lu.receive(node, [Message(x, v) for x, v in decode_counters(blob).items()])
            self._lu.messages_received = 0
            return
        for blob in blobs:
            message = BfMessage.from_bytes(blob)
            self._tables[(message.block.level, message.block.index, message.node_id)] = blob
            self._bf.receive(message)
        self._bf.discard_expired(self.released)


def _refused(step: int, settings: ContinualSettings, detail: str) -> bytes:
    return encode(
        "ReleaseRefused",
        {
            "reason": "missing node",
            "detail": detail,
            "ledger_id": "",
            "epoch": step,
            "window_start": None,
            "window_end": None,
            "epsilon_requested": float(settings.epsilon),
            "delta_requested": 0.0,
            "epsilon_spent": 0.0,
            "delta_spent": 0.0,
            "epsilon_total": float(settings.epsilon),
            "delta_total": 0.0,
            "refused_time": int(time.time() * 1000),
        },
    )
