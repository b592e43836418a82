"""PDCH-BF (Chan–Li–Shi–Xu §4.3): nodes wrap PCC, send masked Bloom tables per completed block; the
aggregator decodes a block only when all k nodes' messages are present.

Configuration used throughout: λ = 1/4, W = 64 (so ℓ = 4, W_0 = 4, W_i = 4·2^i, β_i = 10·2^i), a
declared universe of n = 40 items, δ = 10^-6 (δ_0 = δ/(2(ℓ+1)) = 10^-7, P = ⌈ln(4·10^8)⌉ = 20), 160
steps per node. Equality of the aggregator's estimates with the nodes' PCC estimates can fail only
through a Bloom collision: at most 77 blocks are decoded per run, each exact for all items with
probability ≥ 1 − 10^-7 (Theorem 2), so each such test's false-failure rate is below 10^-5.
"""

from __future__ import annotations

import hashlib
import logging
import math
from fractions import Fraction

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privstream.continual.blocks import BlockId, pcc_params, window_cover
from privstream.continual.masking import CELL_BYTES, LabelReusedError, MaskingError, Roster
from privstream.continual.pcc import PCC, heavy_hitter_bar
from privstream.continual.pdch_bf import (
    HEADER_BYTES,
    BfMessage,
    BlockUnavailableError,
    PdchBfAggregator,
    PdchBfConfig,
    PdchBfNode,
    pdch_bf_config,
)
from privstream.noise.rng import SeededRandomSource

logger = logging.getLogger(__name__)

EPS, LAM, W, N, DELTA, T = 1, Fraction(1, 4), 64, 40, Fraction(1, 10**6), 160
UNIVERSE = range(N)
SEED, SESSION = b"pdch-bf-test-hash-seed", b"test-session-1"


def key(i: int) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(hashlib.sha256(f"pdch-bf-node-{i}".encode()).digest())


def config(k: int, **overrides: object) -> PdchBfConfig:
    args: dict[str, object] = {
        "epsilon": EPS,
        "lam": LAM,
        "window": W,
        "domain": UNIVERSE,
        "k": k,
        "delta": DELTA,
        "hash_seed": SEED,
        "session": SESSION,
    }
    args.update(overrides)
    return pdch_bf_config(**args)  # type: ignore[arg-type]


def stream(i: int, length: int = T) -> list[int]:
    """Skewed: item 0 w.p. 0.3, item 1 w.p. 0.15, else uniform over the universe."""
    rng = SeededRandomSource(f"pdch-bf-stream-{i}")
    out = []
    for _ in range(length):
        u = rng.randbelow(100)
        out.append(0 if u < 30 else 1 if u < 45 else rng.randbelow(N))
    return out


def deployment(k: int, noiseless: bool) -> tuple[Roster, PdchBfConfig, list[PdchBfNode], PdchBfAggregator]:
    keys = {i: key(i) for i in range(1, k + 1)}
    roster = Roster.from_private_keys(keys)
    cfg = config(k)
    nodes = []
    for i, sk in keys.items():
        pcc = (
            PCC(EPS, LAM, W, UNIVERSE, noiseless=True)
            if noiseless
            else PCC(EPS, LAM, W, UNIVERSE, rng=SeededRandomSource(f"pdch-bf-noise-{k}-{i}"))
        )
        nodes.append(PdchBfNode(i, sk, roster, cfg, pcc))
    return roster, cfg, nodes, PdchBfAggregator(roster, cfg)


def summed_pcc(nodes: list[PdchBfNode]) -> dict[int | str, int]:
    total = dict.fromkeys(UNIVERSE, 0)
    for node in nodes:
        for x, v in node.pcc.estimates().items():
            total[x] += v
    return total  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------- sizing


def test_config_sizes_follow_theorem2_and_section_4_3() -> None:
    cfg = config(5)
    p = pcc_params(EPS, LAM, W)
    assert (p.levels, p.w0) == (4, 4)
    assert cfg.delta0 == DELTA / (2 * (p.levels + 1)) == Fraction(1, 10**7)
    assert cfg.rows == math.ceil(math.log(N / 1e-7)) == 20
    for i in range(p.levels + 1):
        assert p.level_beta(i) == 10 * 2**i
        assert cfg.columns(i) == math.ceil(math.e * 5 * p.level_beta(i))
    assert [cfg.columns(i) for i in range(5)] == [136, 272, 544, 1088, 2175]


def test_config_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError):
        config(1)  # masking needs k >= 2
    for bad in ({"delta": 0}, {"delta": 1}, {"hash_seed": b""}, {"session": ""}, {"lam": 2}):
        with pytest.raises(ValueError):
            config(3, **bad)


def test_labels_are_unique_per_block_and_session() -> None:
    cfg, other = config(3), config(3, session=b"test-session-2")
    blocks = [BlockId(i, j) for i in range(5) for j in range(1, 50)]
    labels = {cfg.label(b) for b in blocks}
    assert len(labels) == len(blocks)
    assert labels.isdisjoint(other.label(b) for b in blocks)


def test_message_size_and_wire_round_trip() -> None:
    """Stated configuration: k = 5, λ = 1/4, W = 64, n = 40, δ = 1e-6 ⇒ P = 20, Q_0 = 136. A level-0
    message is 20·136 = 2,720 cells × 8 B = 21,760 B plus a 31-byte header and a 57-byte label."""
    roster, cfg, nodes, _ = deployment(5, noiseless=True)
    msgs = [m for x in stream(1, W) for m in nodes[0].step(x)]
    level0 = next(m for m in msgs if m.block.level == 0)
    assert HEADER_BYTES == 31 and len(level0.label) == 21 + 2 + len(SESSION) + 20 == 57
    assert level0.words == 2720 and level0.size_bytes == 21_760 + 31 + 57 == cfg.message_bytes(0)
    assert len(level0.to_bytes()) == level0.size_bytes
    assert BfMessage.from_bytes(level0.to_bytes()) == level0
    with pytest.raises(ValueError):
        BfMessage.from_bytes(level0.to_bytes()[:-1])
    per_level = {i: cfg.message_bytes(i) for i in range(5)}
    # over W = 64 steps a node completes 16, 8, 4, 2, 1 blocks of levels 0..4
    assert nodes[0].bytes_sent == sum(per_level[i] * (W >> (i + 2)) for i in range(5))
    assert nodes[0].words_sent == sum(20 * cfg.columns(i) * (W >> (i + 2)) for i in range(5))
    assert cfg.bytes_per_step() == sum(Fraction(per_level[i], 4 * 2**i) for i in range(5))
    paper_cell_bytes = 1024 // 8
    logger.info(
        "PDCH-BF k=5, λ=1/4, W=64, n=40, δ=1e-6: bytes per node per block by level %s; %.1f B/step/node; "
        "%d B per masked cell vs %d B per 1024-bit ciphertext (level-0 block would be %d B)",
        per_level,
        float(cfg.bytes_per_step()),
        CELL_BYTES,
        paper_cell_bytes,
        level0.words * paper_cell_bytes,
    )
    assert roster.k == 5


# --------------------------------------------------------------------------------- end to end


def run(
    nodes: list[PdchBfNode], agg: PdchBfAggregator, length: int = T, drop: tuple[int, BlockId] | None = None
):
    """Feed every node its stream; deliver messages (except ``drop``); yield t after each step."""
    streams = [stream(n.node_id, length) for n in nodes]
    for t in range(1, length + 1):
        for node, s in zip(nodes, streams, strict=True):
            for msg in node.step(s[t - 1]):
                if drop != (msg.node_id, msg.block):
                    agg.receive(msg)
        yield t


@pytest.mark.parametrize("k", [2, 5])
def test_noiseless_window_estimates_equal_sum_of_node_pcc_estimates(k: int) -> None:
    _, _, nodes, agg = deployment(k, noiseless=True)
    bar = heavy_hitter_bar(Fraction(3, 10), LAM, k * W)
    checked = 0
    for t in run(nodes, agg):
        expected = summed_pcc(nodes)
        assert agg.estimates(t) == expected
        assert agg.heavy_hitters(t, Fraction(3, 10)) == {x for x, v in expected.items() if v >= bar}
        if t >= W:
            assert 0 in agg.heavy_hitters(t, Fraction(3, 10))  # item 0 holds ~32% of every stream
        agg.discard_expired(t)
        checked += 1
    assert checked == T and agg.pending() == {}
    assert len({n.bytes_sent for n in nodes}) == 1  # every node sends the same (data-independent) volume
    assert agg.bytes_received == {n.node_id: n.bytes_sent for n in nodes}


@pytest.mark.parametrize("k", [2, 5])
def test_noisy_estimates_equal_sum_of_nodes_noisy_block_outputs(k: int) -> None:
    """With PMG noise, the decoded per-block value of each item is Σ_v f̂_{v,B}(x) (no Bloom collision),
    so the window estimate is the sum of the nodes' noisy PCC estimates."""
    _, cfg, nodes, agg = deployment(k, noiseless=False)
    checked, noisy_blocks = 0, 0
    for t in run(nodes, agg):
        expected = summed_pcc(nodes)
        assert agg.estimates(t) == expected
        for block in window_cover(cfg.params, t):
            per_block = dict.fromkeys(UNIVERSE, 0)
            for node in nodes:
                for x, v in node.pcc.block_values(block).items():
                    per_block[x] += v  # type: ignore[index]
            assert agg.block_estimates(block) == per_block
            checked += 1
            noisy_blocks += sum(per_block.values()) > k * cfg.params.level_size(
                block.level
            )  # impossible noiselessly
        agg.discard_expired(t)
    assert checked > 100 and noisy_blocks > 0
    assert nodes[0].guarantee.epsilon == cfg.params.total_epsilon < EPS


def test_missing_node_block_is_refused_until_resent() -> None:
    """Node 2's message for leaf block (0, 3) (steps 9..12) is lost. The aggregator never decodes that
    block, refuses windows whose cover needs it, still answers windows that do not (at t = 16 the cover
    is the single level-2 block (2, 1)), and decodes it once the node resends its identical message."""
    _, cfg, nodes, agg = deployment(3, noiseless=True)
    lost = BlockId(0, 3)
    history: dict[int, dict[int | str, int]] = {}
    for t in run(nodes, agg, length=20, drop=(2, lost)):
        history[t] = summed_pcc(nodes)
    assert not agg.is_decoded(lost)
    with pytest.raises(BlockUnavailableError):
        agg.block_estimates(lost)
    assert agg.missing_nodes(lost) == [2]
    assert agg.pending() == {lost: [2]}
    for t in (12, 13, 14, 15):
        assert lost in window_cover(cfg.params, t)
        with pytest.raises(
            BlockUnavailableError, match=r"block BlockId\(level=0, index=3\): missing node\(s\) \[2\]"
        ):
            agg.estimates(t)
        with pytest.raises(BlockUnavailableError):
            agg.heavy_hitters(t, Fraction(1, 2))
    assert window_cover(cfg.params, 16) == [BlockId(2, 1)]
    assert agg.estimates(16) == history[16]
    agg.receive(nodes[1].resend(lost))
    assert agg.is_decoded(lost) and agg.pending() == {}
    assert all(agg.estimates(t) == history[t] for t in (12, 13, 14, 15))


def test_node_refuses_republishing_a_block() -> None:
    _, _, nodes, _ = deployment(2, noiseless=True)
    for x in stream(1, 4):
        nodes[0].step(x)
    with pytest.raises(LabelReusedError):
        nodes[0].publish(BlockId(0, 1), {0: 1})
    with pytest.raises(ValueError):
        nodes[0].publish(BlockId(0, 2), dict.fromkeys(range(11), 1))  # 11 > β_0 = 10 non-zeros
    with pytest.raises(ValueError):
        nodes[0].publish(BlockId(0, 3), {0: -1})


def test_aggregator_refuses_bad_or_conflicting_messages() -> None:
    roster, cfg, nodes, agg = deployment(2, noiseless=True)
    msg = nodes[0].publish(BlockId(0, 1), {0: 3})
    agg.receive(msg)
    agg.receive(msg.to_bytes())  # an identical resend is ignored
    assert agg.messages_received[1] == 2 and agg.missing_nodes(BlockId(0, 1)) == [2]
    other = PdchBfNode(1, key(1), roster, config(2, session=b"other"), PCC(EPS, LAM, W, noiseless=True))
    conflicting = other.publish(BlockId(0, 1), {0: 3})
    with pytest.raises(ValueError, match="period label"):
        agg.receive(conflicting)
    forged = BfMessage(1, msg.block, msg.label, msg.rows, msg.columns, msg.cells ^ 1)
    with pytest.raises(MaskingError, match="two different messages"):
        agg.receive(forged)
    outsider = BfMessage(9, msg.block, msg.label, msg.rows, msg.columns, msg.cells)
    with pytest.raises(MaskingError):
        agg.receive(outsider)
    wrong_shape = BfMessage(2, msg.block, msg.label, msg.rows, msg.columns - 1, msg.cells[:-20])
    with pytest.raises(ValueError, match="shape"):
        agg.receive(wrong_shape)
    agg.receive(nodes[1].publish(BlockId(0, 1), {0: 4, 5: 1}))
    assert agg.is_decoded(BlockId(0, 1))
    assert agg.estimates(4, [0, 5, 7]) == {0: 7, 5: 1, 7: 0}
    with pytest.raises(ValueError):
        PdchBfAggregator(roster, config(3))
    with pytest.raises(ValueError):
        PdchBfNode(1, key(1), roster, cfg, PCC(EPS, Fraction(1, 8), W, noiseless=True))
