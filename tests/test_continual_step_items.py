"""Time steps with many items (``step_items``) for PCC, PDCH-LU and PDCH-BF, and the public
``window_items`` that replaces W in PDCH-LU's thresholds and the release bars (Chan, Li, Shi, Xu;
Remark 1 relaxed with data-independent step boundaries)."""

from __future__ import annotations

import hashlib
import random
from fractions import Fraction

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privstream.continual import (
    PCC,
    BlockId,
    LazyUpdateAggregator,
    LazyUpdateNode,
    Message,
    PdchBfAggregator,
    PdchBfNode,
    Roster,
    pdch_bf_config,
)
from privstream.noise import SeededRandomSource
from privstream.sketches import StandardMisraGries

KEY = bytes(range(32))
DOMAIN = range(40)


def singles(seed: int, length: int) -> list[int]:
    r = random.Random(seed)
    return [r.choice((0, 1, 2)) if r.random() < 0.5 else r.randrange(40) for _ in range(length)]


def batches(seed: int, steps: int, most: int = 6) -> list[list[int]]:
    """Steps of 0..``most`` items, skewed so that every level's MG core decrements."""
    r = random.Random(seed)
    return [singles(r.randrange(10**9), r.randrange(most + 1)) for _ in range(steps)]


@pytest.mark.parametrize("noisy", [False, True])
def test_pcc_singleton_steps_equal_step(noisy: bool) -> None:
    opts: dict[str, object] = {"noise_key": KEY} if noisy else {"noiseless": True}
    a = PCC(1, Fraction(1, 8), 96, DOMAIN, **opts)  # type: ignore[arg-type]
    b = PCC(1, Fraction(1, 8), 96, DOMAIN, **opts)  # type: ignore[arg-type]
    for x in singles(1, 300):
        assert a.step(x) == b.step_items([x])
        assert a.estimates() == b.estimates()
    assert a.to_bytes() == b.to_bytes()


def test_pcc_numpy_batch_equals_list_batch() -> None:
    a = PCC(1, Fraction(1, 8), 96, DOMAIN, noise_key=KEY)
    b = PCC(1, Fraction(1, 8), 96, DOMAIN, noise_key=KEY)
    for step in batches(2, 120):
        assert a.step_items(step) == b.step_items(np.array(step, dtype=np.int64))
    assert a.to_bytes() == b.to_bytes()


def test_multi_item_blocks_hold_the_mg_of_the_concatenated_items() -> None:
    pcc = PCC(1, Fraction(1, 8), 96, DOMAIN, noiseless=True)
    p = pcc.params
    steps = batches(3, 200)
    checked = 0
    for t, step in enumerate(steps, start=1):
        for block in pcc.step_items(step):
            assert block.end(p) == t
            mg = StandardMisraGries(p.level_beta(block.level))
            for items in steps[block.start(p) - 1 : t]:
                mg.update_batch(items)
            assert pcc.block_values(block) == mg.counters()
            checked += 1
    assert checked == sum(200 // p.level_size(i) for i in range(p.levels + 1))


def test_empty_steps_advance_time_and_release_on_schedule() -> None:
    pcc = PCC(1, Fraction(1, 8), 96, DOMAIN, noiseless=True)
    w0 = pcc.params.w0
    released = [pcc.step_items([]) for _ in range(w0)]
    assert pcc.t == w0 and released[-1] == [BlockId(0, 1)] and pcc.block_values(BlockId(0, 1)) == {}


def test_bad_item_changes_nothing() -> None:
    pcc = PCC(1, Fraction(1, 8), 96, DOMAIN, noiseless=True)
    pcc.step_items([1, 2])
    before = pcc.to_bytes()
    with pytest.raises(TypeError):
        pcc.step_items([3, 1.5])
    assert pcc.to_bytes() == before and pcc.t == 1


def test_multi_item_state_round_trips_and_continues_identically() -> None:
    pcc = PCC(1, Fraction(1, 8), 96, DOMAIN, noise_key=KEY)
    steps = batches(4, 150)
    for step in steps[:77]:
        pcc.step_items(step)
    restored = PCC.from_bytes(pcc.to_bytes(), DOMAIN)
    for step in steps[77:]:
        assert pcc.step_items(step) == restored.step_items(step)
        assert pcc.estimates() == restored.estimates()
    assert pcc.to_bytes() == restored.to_bytes()


def test_guarantee_names_the_many_items_relation() -> None:
    g = PCC(1, Fraction(1, 8), 96, DOMAIN, noise_key=KEY).guarantee
    assert "add or remove one item of one step" in g.neighbour_relation
    assert g.epsilon is not None and g.epsilon < 1


def test_lu_singleton_steps_equal_step() -> None:
    a = LazyUpdateNode(1, Fraction(1, 4), 200, DOMAIN, rng=SeededRandomSource(5))
    b = LazyUpdateNode(1, Fraction(1, 4), 200, DOMAIN, rng=SeededRandomSource(5))
    for x in singles(6, 500):
        assert a.step(x) == b.step_items([x])
    assert a.to_bytes() == b.to_bytes()


def test_window_items_replaces_w_in_the_thresholds_and_the_bar() -> None:
    node = LazyUpdateNode(1, Fraction(11, 100), 10, noiseless=True, window_items=100)
    assert (node.up_threshold, node.off_threshold) == (9, 3)
    assert node.window_items == 100 and node.window == 10
    default = LazyUpdateNode(1, Fraction(11, 100), 100, noiseless=True)
    assert (default.up_threshold, default.off_threshold) == (9, 3)
    agg = LazyUpdateAggregator(2, Fraction(1, 100), 10, window_items=100)  # bar (0.05 − 0.01)·2·100 = 8
    by_w = LazyUpdateAggregator(2, Fraction(1, 100), 10)  # bar (0.05 − 0.01)·2·10 = 0.8
    for a in (agg, by_w):
        a.receive(0, [Message(7, 5)])
        a.receive(1, [Message(7, 4), Message(8, 8)])
    assert agg.heavy_hitters(0.05) == by_w.heavy_hitters(0.05) == {7, 8}
    for a in (agg, by_w):
        a.receive(1, [Message(8, 7)])
    assert agg.heavy_hitters(0.05) == {7} and by_w.heavy_hitters(0.05) == {7, 8}
    for bad in (0, -3, True, 2.5):
        with pytest.raises(ValueError, match="window_items"):
            LazyUpdateNode(1, Fraction(1, 4), 10, noiseless=True, window_items=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="window_items"):
            LazyUpdateAggregator(2, Fraction(1, 4), 10, window_items=bad)  # type: ignore[arg-type]


def test_lu_multi_item_steps_follow_the_rules_and_round_trip() -> None:
    node = LazyUpdateNode(1, Fraction(1, 4), 64, DOMAIN, window_items=200, noiseless=True)
    ref = PCC(1, Fraction(1, 44), 64, DOMAIN, noiseless=True)  # the node's PCC(ε, λ/11)
    steps = batches(7, 200)
    last: dict[int, int] = {}
    for t, step in enumerate(steps, start=1):
        ref.step_items(step)
        sent = node.step_items(step)
        for x, c in sent:
            if c:
                last[x] = c
            else:
                last.pop(x, None)
        assert last == node.last
        for x, v in ref.estimates().items():  # after the rules: within the thresholds
            assert abs(v - last.get(x, 0)) <= node.up_threshold
        if t == 100:
            restored = LazyUpdateNode.from_bytes(node.to_bytes(), DOMAIN)
            assert restored.window_items == 200 and restored.up_threshold == node.up_threshold
    assert node.up_threshold == Fraction(9, 11) * Fraction(1, 4) * 200


def bf_setup(k: int) -> tuple[list[PdchBfNode], PdchBfAggregator]:
    keys = {
        i: X25519PrivateKey.from_private_bytes(hashlib.sha256(f"step-items-{i}".encode()).digest())
        for i in range(1, k + 1)
    }
    roster = Roster.from_private_keys(keys)
    cfg = pdch_bf_config(
        1, Fraction(1, 4), 64, DOMAIN, k, Fraction(1, 10**6), b"seed", b"s", window_items=300
    )
    nodes = [
        PdchBfNode(i, sk, roster, cfg, PCC(1, Fraction(1, 4), 64, DOMAIN, noise_key=KEY + bytes([i])))
        for i, sk in keys.items()
    ]
    return nodes, PdchBfAggregator(roster, cfg)


def test_bf_singleton_steps_equal_step_and_multi_item_windows_decode() -> None:
    a, b = bf_setup(2)[0][0], bf_setup(2)[0][0]
    for x in singles(8, 40):
        assert [m.to_bytes() for m in a.step(x)] == [m.to_bytes() for m in b.step_items([x])]
    nodes, agg = bf_setup(2)
    streams = [batches(9, 80), batches(10, 80)]
    for t in range(1, 81):
        for node, steps in zip(nodes, streams, strict=True):
            for message in node.step_items(steps[t - 1]):
                agg.receive(message)
    expected = dict.fromkeys(DOMAIN, 0)
    for node in nodes:
        for x, v in node.pcc.estimates().items():
            expected[x] += v
    assert agg.estimates(80) == expected  # exact unless a Bloom collision (prob. <= 1e-5)
    assert agg.config.window_total == 2 * 300
    bar = (Fraction(1, 2) - Fraction(1, 4)) * 2 * 300  # (θ − λ)·k·window_items
    assert agg.heavy_hitters(80, Fraction(1, 2)) == {x for x, v in expected.items() if v >= bar}
