"""PDCH-BF: distributed continual heavy hitters with aggregator obliviousness (Chan, Li, Shi, Xu,
"Differentially Private Continual Monitoring of Heavy Hitters from Distributed Streams", §4.3).

Every node runs PCC (:class:`~privstream.continual.pcc.PCC`, §3.3) on its own stream. When a level-i
block completes, PCC releases its PMG(ε_i, λ_i) output f̂ once; the node (:class:`PdchBfNode`)

1. builds the §4.2 Bloom count table of f̂ (:mod:`privstream.continual.bloom`) with
   ``P = ⌈ln(n/δ_0)⌉`` rows and ``Q_i = ⌈e·k·β_i⌉`` columns, where ``δ_0 = δ/(2(ℓ+1))`` (the paper's
   communication paragraph prints ``δ/2^(ℓ+1)``; its text and final bound use ``δ/(2 log(1/λ))``, and a
   window's cover has at most 2(ℓ+1) blocks, so ``δ/(2(ℓ+1))`` is the consistent choice);
2. masks **every** cell, zeros included, with the pairwise-masking scheme of
   :mod:`privstream.continual.masking` under the period label of the block (:meth:`PdchBfConfig.label`);
3. sends a :class:`BfMessage` (node id, block id, period label, masked cells).

The aggregator (:class:`PdchBfAggregator`) decodes a block's summed table ``A_B = Σ_v A_{v,B}`` once it
holds all k nodes' messages for that block, and estimates the window count at t as

``est_t(x) = Σ_{B ∈ 𝒞_t} min_p A_B[p][H_{B,p}(x)]``

over PCC's window cover 𝒞_t (the block grid is time-aligned, so 𝒞_t is the same for every node). It
releases ``{x ∈ U : est_t(x) ≥ (θ − λ)·k·W}`` over the declared universe U. By Theorem 2 each block's
min-rule is exact for all of U with probability ≥ 1 − δ_0, so a window's estimate equals
``Σ_v 𝒫_t^{(v)}(x)`` (the sum of the nodes' PCC estimates) for all x with probability ≥ 1 − δ; Lemma 3
then gives λ-approximate heavy hitters with probability ≥ 1 − 2δ (§4.3; strictly, a union bound over
the k nodes' PCC failures is needed too, which the paper does not discuss).

Hash family per block: block B = (i, j) uses :class:`BloomHashFamily` with seed
``hash_seed ‖ i ‖ j`` (u32, u64 big-endian), so blocks use independent hash functions and a collision
never persists from one block to the next. ``hash_seed`` is public (:func:`~privstream.continual.bloom.new_hash_seed`).

Privacy. Each node's Bloom tables are a deterministic function of its PCC block releases and public
hashes, so its transcript is event-level ε-DP by Lemma 3 even against someone who unmasks it
(:attr:`PdchBfNode.guarantee`). Masking adds aggregator obliviousness (Def. 4): under the trust
assumptions of :mod:`privstream.continual.masking` (honest-but-curious aggregator, authenticated public
keys, no node–aggregator collusion) the aggregator learns only the per-cell sums over all k nodes of
each block's table. Note that it learns the whole summed table, collision cells included, not only the
per-item sums.

Setup (see :mod:`privstream.continual.masking`): every node generates an X25519 key pair, registers
its public key on an authenticated bulletin board (the :class:`~privstream.continual.masking.Roster`
every party uses), and all parties agree on the public :class:`PdchBfConfig`: PCC's (ε, λ, W), the
declared universe U, k, δ, the public hash seed and a ``session`` id. Period labels are
``"privstream/pdch-bf/v1" ‖ session ‖ level ‖ index ‖ P ‖ Q``; a node refuses to mask twice under one
label. **Labels repeat if a deployment restarts its clock with the same keys and session**, so every run
must use a fresh ``session`` (or fresh keys), and a node restored from a checkpoint must not re-release
a block it already sent (persisting the used labels is the operator's job).

Missing nodes (chosen policy). A block whose messages are not all present is never decoded, and no
partial sum is ever produced (the masks of the present nodes do not cancel without the missing one).
:meth:`PdchBfAggregator.estimates` and :meth:`PdchBfAggregator.heavy_hitters` **refuse** (raise
:class:`BlockUnavailableError`) for every window whose cover needs such a block, rather than silently
excluding it (an estimate without the block would undercount by up to that block's whole mass and
void the λ-approximation). What operators should do: get the missing node to resend its message for
that block (:meth:`PdchBfNode.resend` returns the identical message it sent; re-masking different data
under the same label is refused). If the node cannot (it crashed and lost its PCC state), the windows
needing the block stay unreleasable until the block expires — at most W steps after it started — and
releases resume automatically for later windows. :meth:`PdchBfAggregator.missing_nodes` and
:meth:`PdchBfAggregator.pending` say which nodes are missing for which blocks.

Communication: a level-i message carries ``P·Q_i`` masked cells of 8 bytes plus a header
(:meth:`PdchBfConfig.message_bytes`); the paper's experiments assume 1024-bit (128-byte) ciphertexts per
cell, 16 times more.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privstream.accounting.budget import exact_value
from privstream.continual.blocks import BlockId, PccParams, is_expired, pcc_params, window_cover
from privstream.continual.bloom import BloomHashFamily, BloomTable, bloom_columns, bloom_rows
from privstream.continual.masking import (
    CELL_BYTES,
    DecodeRangeError,
    MaskingError,
    MaskingNode,
    MissingContributionError,
    Roster,
    unmask_sum,
)
from privstream.continual.pcc import PCC, ContinualGuarantee, continual_guarantee, heavy_hitter_bar
from privstream.mechanisms.domain_topk import DeclaredDomain, Domain, declared_domain
from privstream.sketches import Item, normalize_item
from privstream.validation import check_int

logger = logging.getLogger(__name__)

_LABEL_DOMAIN = b"privstream/pdch-bf/v1"
_MAGIC = b"PSBF"
_VERSION = 1
_HEADER = struct.Struct(">4sBIIQIIH")  # magic, version, node, level, index, P, Q, label length
HEADER_BYTES = _HEADER.size
"""Fixed header bytes of a :class:`BfMessage` (the period label follows, then the cells)."""


class BlockUnavailableError(MissingContributionError):
    """A window needs a block that cannot be decoded because some node's message is missing."""


@lru_cache(maxsize=4096)
def _block_family(seed: bytes, rows: int, columns: int) -> BloomHashFamily:
    return BloomHashFamily.from_seed(seed, rows, columns)


@dataclass(frozen=True, eq=False)
class PdchBfConfig:
    """The public parameters every node and the aggregator share (:func:`pdch_bf_config`)."""

    params: PccParams
    domain: DeclaredDomain
    k: int
    delta: Fraction
    hash_seed: bytes
    session: bytes
    #: public items per node per window replacing W in the release bar (None: W, one item per step)
    window_items: int | None = None

    @property
    def window_total(self) -> int:
        """k·W, or k·window_items when declared: the k-stream window size the release bar uses."""
        return self.k * (self.params.window if self.window_items is None else self.window_items)

    @property
    def n(self) -> int:
        """|U|, the declared universe size."""
        return self.domain.size

    @property
    def delta0(self) -> Fraction:
        """Per-block Bloom failure probability δ_0 = δ/(2(ℓ+1)) (see the module docstring for why not the printed δ/2^(ℓ+1))."""
        return self.delta / (2 * (self.params.levels + 1))

    @property
    def rows(self) -> int:
        """P = ⌈ln(n/δ_0)⌉, the same at every level."""
        return bloom_rows(self.n, self.delta0)

    def columns(self, level: int) -> int:
        """Q_i = ⌈e·k·β_i⌉ for level i (β_i = PCC's level_beta)."""
        return bloom_columns(self.k, self.params.level_beta(level))

    def shape(self, level: int) -> tuple[int, int]:
        """(P, Q_i)."""
        return (self.rows, self.columns(level))

    def family(self, block: BlockId) -> BloomHashFamily:
        """Block B's public hash family (seed ``hash_seed ‖ level ‖ index``)."""
        seed = self.hash_seed + struct.pack(">IQ", block.level, block.index)
        return _block_family(seed, self.rows, self.columns(block.level))

    def label(self, block: BlockId) -> bytes:
        """Block B's period label: unique per (session, block), binding the table shape."""
        rows, columns = self.shape(block.level)
        return (
            _LABEL_DOMAIN
            + struct.pack(">H", len(self.session))
            + self.session
            + struct.pack(">IQII", block.level, block.index, rows, columns)
        )

    def message_bytes(self, level: int) -> int:
        """Bytes of one node's level-``level`` message on the wire (header, label, P·Q_i cells)."""
        rows, columns = self.shape(level)
        return HEADER_BYTES + len(self.label(BlockId(level, 1))) + CELL_BYTES * rows * columns

    def bytes_per_step(self) -> Fraction:
        """Average bytes one node sends per time step: Σ_i message_bytes(i)/W_i (one level-i block
        completes every W_i steps); the paper's O((k/(λW))·log²(1/λ)·log(n·log(1/λ)/δ)) words."""
        p = self.params
        return sum(
            (Fraction(self.message_bytes(i), p.level_size(i)) for i in range(p.levels + 1)), Fraction(0)
        )


def pdch_bf_config(
    epsilon: object,
    lam: object,
    window: object,
    domain: Domain,
    k: int,
    delta: object,
    hash_seed: bytes,
    session: bytes,
    window_items: int | None = None,
) -> PdchBfConfig:
    """Validate and bundle PDCH-BF's public parameters. ``lam`` is rounded to a power of 1/2 as PCC
    does; ``delta`` ∈ (0, 1) is the per-window Bloom failure probability; ``hash_seed`` is the public
    random seed (:func:`~privstream.continual.bloom.new_hash_seed`); ``session`` identifies this run
    (fresh per run: it keeps period labels unique); ``window_items``: the PUBLIC items per node per
    window that replaces W in the release bar with many items per step (None: W)."""
    params = pcc_params(epsilon, lam, window)
    k = check_int("k", k, minimum=2, type_error=ValueError)
    if isinstance(delta, bool) or not isinstance(delta, int | float | Fraction):
        raise ValueError(f"delta: must be a number in (0, 1), got {type(delta).__name__}")
    exact_delta = exact_value(delta)
    if not 0 < exact_delta < 1:
        raise ValueError(f"delta: must lie in (0, 1), got {delta}")
    for name, value in (("hash_seed", hash_seed), ("session", session)):
        if not isinstance(value, bytes) or not value:
            raise ValueError(f"{name}: must be non-empty bytes")
    if len(session) >= 2**16:
        raise ValueError("session: must be shorter than 65536 bytes")
    items = None if window_items is None else check_int("window_items", window_items, type_error=ValueError)
    config = PdchBfConfig(params, declared_domain(domain), k, exact_delta, hash_seed, session, items)
    for level in range(params.levels + 1):
        config.columns(level)  # fails fast if some Q_i is too large
    return config


@dataclass(frozen=True, eq=False)
class BfMessage:
    """One node's masked Bloom table for one block: the PDCH-BF wire message."""

    node_id: int
    block: BlockId
    label: bytes
    rows: int
    columns: int
    cells: np.ndarray  #: P·Q uint64 masked cells, row-major

    def to_bytes(self) -> bytes:
        """``>4sBIIQIIH`` header (magic, version, node, level, index, P, Q, label length), the label,
        then the cells as little-endian uint64."""
        head = _HEADER.pack(
            _MAGIC,
            _VERSION,
            self.node_id,
            self.block.level,
            self.block.index,
            self.rows,
            self.columns,
            len(self.label),
        )
        return head + self.label + np.asarray(self.cells, dtype="<u8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> BfMessage:
        """Inverse of :meth:`to_bytes`; ValueError on a malformed message."""
        if len(data) < HEADER_BYTES:
            raise ValueError("PDCH-BF message truncated")
        magic, version, node, level, index, rows, columns, label_len = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != _VERSION:
            raise ValueError("not a PDCH-BF v1 message")
        body = data[HEADER_BYTES + label_len :]
        if len(data) < HEADER_BYTES + label_len or len(body) != CELL_BYTES * rows * columns:
            raise ValueError("PDCH-BF message has the wrong length for its P·Q cells")
        label = data[HEADER_BYTES : HEADER_BYTES + label_len]
        cells = np.frombuffer(body, dtype="<u8").astype(np.uint64)
        return cls(node, BlockId(level, index), label, rows, columns, cells)

    @property
    def words(self) -> int:
        """Masked cells (one 64-bit word each), the paper's unit of communication."""
        return self.rows * self.columns

    @property
    def size_bytes(self) -> int:
        """Bytes on the wire."""
        return HEADER_BYTES + len(self.label) + CELL_BYTES * self.words

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BfMessage):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]


class PdchBfNode:
    """A PDCH-BF node: wraps its :class:`PCC` and turns every newly released block into a masked
    Bloom table (§4.3).

    ``pcc`` must run with the config's parameters on the config's declared universe. Feed items with
    :meth:`step`; the returned messages go to the aggregator. :meth:`publish` is the per-block hook
    (exposed for callers that drive PCC themselves). Sent messages are kept until their block expires
    so they can be resent verbatim (:meth:`resend`).
    """

    def __init__(
        self, node_id: int, private_key: X25519PrivateKey, roster: Roster, config: PdchBfConfig, pcc: PCC
    ) -> None:
        if roster.k != config.k:
            raise ValueError(f"roster has {roster.k} nodes but the config says k = {config.k}")
        if pcc.params != config.params:
            raise ValueError("pcc: its (epsilon, lambda, window) differ from the config's")
        self.config = config
        self.pcc = pcc
        self.masker = MaskingNode(node_id, private_key, roster)
        self._sent: dict[BlockId, BfMessage] = {}
        self.bytes_sent = 0
        self.words_sent = 0
        self.messages_sent = 0

    @property
    def node_id(self) -> int:
        return self.masker.node_id

    @property
    def guarantee(self) -> ContinualGuarantee:
        """Event-level ε-DP of the whole transcript (post-processing of PCC, Lemma 3); aggregator
        obliviousness is computational and comes on top (module docstring)."""
        return continual_guarantee(
            self.config.params,
            self.pcc.noiseless,
            "Chan-Li-Shi-Xu §4.3 (PDCH-BF): the masked Bloom tables are post-processing of the node's "
            "PCC block releases with public hashes, so Lemma 3's event-level bound applies",
        )

    def step(self, item: object) -> list[BfMessage]:
        """Advance PCC by one time step; returns the messages for the blocks it released. Exactly
        ``step_items([item])``."""
        return self.step_items([item])

    def step_items(self, items: Sequence[object] | np.ndarray) -> list[BfMessage]:
        """Advance PCC by one time step with any number of items (:meth:`PCC.step_items`; steps cut
        by data-independent punctuations); returns the messages for the blocks it released. A block
        that has already expired when it completes (a top-level block longer than the window) is in
        no window's cover and is not sent."""
        released = self.pcc.step_items(items)
        stored = set(self.pcc.stored_blocks)
        out = [self.publish(block, self.pcc.block_values(block)) for block in released if block in stored]
        t = self.pcc.t
        for block in [b for b in self._sent if is_expired(self.config.params, b, t)]:
            del self._sent[block]
        return out

    def publish(self, block: BlockId, values: Mapping[Item, int]) -> BfMessage:
        """Mask the Bloom table of ``block``'s released PMG output ``values`` (non-negative, at most β_i
        non-zeros). Refuses a block already published (its period label is used)."""
        cfg = self.config
        level = check_int("block.level", block.level, minimum=0, below=cfg.params.levels + 1)
        check_int("block.index", block.index)
        support = sum(1 for v in values.values() if v)
        if support > cfg.params.level_beta(level):
            raise ValueError(
                f"block {block}: {support} non-zeros exceed β_{level} = {cfg.params.level_beta(level)}"
            )
        table = BloomTable.from_counts(cfg.family(block), values)
        label = cfg.label(block)
        masked = self.masker.mask(label, table.flat())
        rows, columns = cfg.shape(level)
        message = BfMessage(self.node_id, block, label, rows, columns, masked)
        self._sent[block] = message
        self.bytes_sent += message.size_bytes
        self.words_sent += message.words
        self.messages_sent += 1
        logger.debug(
            "node %d sent block %s: %d cells, %d bytes",
            self.node_id,
            block,
            message.words,
            message.size_bytes,
        )
        return message

    def resend(self, block: BlockId) -> BfMessage:
        """The identical message sent for ``block`` (KeyError once the block has expired)."""
        return self._sent[block]


class PdchBfAggregator:
    """The PDCH-BF aggregator: collects one message per node per block, decodes a block's summed table
    only when all k are present, and answers window estimates and heavy hitters (§4.3)."""

    def __init__(self, roster: Roster, config: PdchBfConfig) -> None:
        if roster.k != config.k:
            raise ValueError(f"roster has {roster.k} nodes but the config says k = {config.k}")
        self.roster = roster
        self.config = config
        self._pending: dict[BlockId, dict[int, BfMessage]] = {}
        self._decoded: dict[BlockId, np.ndarray] = {}  # per-block min-rule over the universe, in its order
        self._horizon = 0  # the latest t given to discard_expired
        self.bytes_received: dict[int, int] = dict.fromkeys(roster.node_ids, 0)
        self.messages_received: dict[int, int] = dict.fromkeys(roster.node_ids, 0)

    def receive(self, message: BfMessage | bytes) -> None:
        """Accept one node's message. Refuses (MaskingError/ValueError) a node outside the roster, a wrong
        label or table shape, and a message conflicting with one already held; an identical resend is
        ignored, as is a message for a block that has already expired."""
        msg = BfMessage.from_bytes(message) if isinstance(message, bytes) else message
        cfg = self.config
        if msg.node_id not in self.roster.keys:
            raise MaskingError(f"message from node {msg.node_id}, which is not in the roster")
        if not 0 <= msg.block.level <= cfg.params.levels or msg.block.index < 1:
            raise ValueError(f"message for an invalid block {msg.block}")
        if (msg.rows, msg.columns) != cfg.shape(msg.block.level) or msg.cells.shape != (msg.words,):
            raise ValueError(f"message for block {msg.block} has the wrong table shape")
        if msg.label != cfg.label(msg.block):
            raise ValueError(f"message for block {msg.block} carries the wrong period label")
        self.bytes_received[msg.node_id] += msg.size_bytes
        self.messages_received[msg.node_id] += 1
        if msg.block in self._decoded or is_expired(cfg.params, msg.block, self._horizon):
            held = msg.block in self._decoded
            logger.info(
                "ignoring node %d's message for %s block %s",
                msg.node_id,
                "decoded" if held else "expired",
                msg.block,
            )
            return
        slot = self._pending.setdefault(msg.block, {})
        previous = slot.get(msg.node_id)
        if previous is not None:
            if previous == msg:
                return
            raise MaskingError(f"node {msg.node_id} sent two different messages for block {msg.block}")
        slot[msg.node_id] = msg
        if len(slot) == self.roster.k:
            self._decode(msg.block)

    def _decode(self, block: BlockId) -> None:
        slot = self._pending.pop(block)
        sums = unmask_sum({i: m.cells for i, m in slot.items()}, self.roster)
        if sums.size and int(sums.min()) < 0:
            raise DecodeRangeError(
                f"block {block}: a decoded Bloom cell is negative; the messages are inconsistent"
            )
        table = BloomTable.from_cells(self.config.family(block), sums.reshape(self.config.shape(block.level)))
        universe = self.config.domain
        self._decoded[block] = np.array(
            [table.estimate(universe.item(pos)) for pos in range(universe.size)], dtype=np.int64
        )
        logger.debug("decoded block %s", block)

    def block_estimates(self, block: BlockId) -> dict[Item, int]:
        """``min_p A_B[p][H_{B,p}(x)]`` for every x of the declared universe: ``Σ_v f̂_{v,B}(x)`` for all x
        with probability ≥ 1 − δ_0 (Theorem 2). Raises :class:`BlockUnavailableError` unless decoded."""
        if block not in self._decoded:
            raise BlockUnavailableError(
                f"block {block} is not decoded: missing node(s) {self.missing_nodes(block)}"
            )
        universe, values = self.config.domain, self._decoded[block]
        return {universe.item(pos): int(values[pos]) for pos in range(universe.size)}

    def missing_nodes(self, block: BlockId) -> list[int]:
        """Nodes whose message for ``block`` has not arrived ([] once the block is decoded)."""
        if block in self._decoded:
            return []
        have = self._pending.get(block, {})
        return [i for i in self.roster.node_ids if i not in have]

    def pending(self) -> dict[BlockId, list[int]]:
        """Every block with some but not all messages, and its missing nodes."""
        return {b: self.missing_nodes(b) for b in sorted(self._pending)}

    def is_decoded(self, block: BlockId) -> bool:
        return block in self._decoded

    def discard_expired(self, t: int) -> None:
        """Drop every block (decoded or pending) that has expired at ``t``; later messages for such
        blocks are ignored."""
        p = self.config.params
        self._horizon = max(self._horizon, t)
        for store in (self._decoded, self._pending):
            for block in [b for b in store if is_expired(p, b, self._horizon)]:
                del store[block]

    def _window(self, t: int) -> np.ndarray:
        cover = window_cover(self.config.params, t)
        unavailable = {b: self.missing_nodes(b) for b in cover if b not in self._decoded}
        if unavailable:
            detail = "; ".join(f"block {b}: missing node(s) {m}" for b, m in unavailable.items())
            raise BlockUnavailableError(
                f"window at t={t} needs undecodable blocks ({detail}); release refused"
            )
        total = np.zeros(self.config.n, dtype=np.int64)
        for block in cover:
            total += self._decoded[block]
        return total

    def estimates(self, t: int, items: Iterable[object] | None = None) -> dict[Item, int]:
        """``est_t(x) = Σ_{B∈𝒞_t} min_p A_B[p][H_{B,p}(x)]`` for every x of the declared universe (or of
        ``items``, which must belong to it). Raises :class:`BlockUnavailableError` if a cover block is
        undecodable."""
        t = check_int("t", t)
        total = self._window(t)
        universe = self.config.domain
        if items is None:
            return {universe.item(pos): int(total[pos]) for pos in range(universe.size)}
        out: dict[Item, int] = {}
        for item in items:
            x = normalize_item(item)
            pos = universe.position(x)
            if pos is None:
                raise ValueError(f"item {x!r} is not in the declared universe")
            out[x] = int(total[pos])
        return out

    def estimate(self, t: int, item: object) -> int:
        """``est_t(item)``."""
        x = normalize_item(item)
        return self.estimates(t, [x])[x]

    def heavy_hitters(self, t: int, theta: object) -> set[Item]:
        """``{x ∈ U : est_t(x) ≥ (θ − λ)·k·W}`` (λ as PCC runs it, rounded to a power of 1/2; W replaced
        by the config's public ``window_items`` if declared): a 2λ-approximation of the θ-heavy hitters
        of the k-stream window whenever est_t is a λ-approximate count. Raises
        :class:`BlockUnavailableError` if the window needs an undecodable block."""
        bar = heavy_hitter_bar(theta, self.config.params.lam, self.config.window_total)
        return {x for x, v in self.estimates(t).items() if v >= bar}
