"""PDCH-LU (Chan, Li, Shi, Xu Alg. 2, Theorem 1): the node's PCC(ε, λ/11), the Up/Off/Down rules in
order, the aggregator, the lazy-update invariant with noise disabled, and the node's binary state."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

import pytest

from privstream.continual import LazyUpdateAggregator, LazyUpdateNode, Message
from privstream.noise import SeededRandomSource
from privstream.sketches import SketchFormatError

KEY = bytes(range(32))


def streams(k: int, length: int, universe: int, seed: int, phase: int = 150) -> list[list[int]]:
    """k skewed streams whose hot item changes every ``phase`` steps (so Up, Down and Off fire)."""
    r = random.Random(seed)
    out = []
    for i in range(k):
        s = []
        for t in range(length):
            hot = (t // phase + i) % universe
            s.append(hot if r.random() < 0.7 else r.randrange(universe))
        out.append(s)
    return out


def test_node_runs_pcc_with_lambda_over_11_and_the_node_thresholds() -> None:
    node = LazyUpdateNode(1, 0.1, 1000, range(10))
    assert node.lam == Fraction(1, 10)
    assert node.pcc.params.lam == Fraction(1, 128)  # 0.1/11 = 0.00909…, rounded down: 1/128
    assert node.up_threshold == Fraction(9, 11) * Fraction(1, 10) * 1000
    assert node.off_threshold == Fraction(3, 11) * Fraction(1, 10) * 1000
    assert node.guarantee.epsilon == node.pcc.params.total_epsilon < 1
    assert "Theorem 1" in node.guarantee.theorem
    assert not LazyUpdateNode(1, 0.1, 1000, noiseless=True).guarantee.private
    for bad in (0, 1, 2.5):
        with pytest.raises(ValueError, match="^lam: "):
            LazyUpdateNode(1, bad, 1000, range(10))


class ScriptedPCC:
    """Stands in for the node's PCC: 𝒫_t follows a script."""

    def __init__(self, script: list[dict[int, int]]) -> None:
        self.script, self.t = script, 0

    def step_items(self, items: object) -> list:
        self.t += 1
        return []

    def estimates(self) -> dict[int, int]:
        return dict(self.script[self.t - 1])


def test_up_off_down_rules_in_order() -> None:
    node = LazyUpdateNode(1, Fraction(11, 100), 100, noiseless=True)  # up = 9, off = 3
    assert (node.up_threshold, node.off_threshold) == (9, 3)
    script = [
        {1: 9},  # 9 > 0 + 9? no
        {1: 10},  # Up → 10
        {1: 19},  # 19 > 10 + 9? no; 19 < 10 − 9? no
        {1: 20},  # Up → 20
        {1: 10},  # Down? 10 < 11 → yes → 10
        {1: 2},  # Off (2 < 3; tested before Down, which would send 2) → 0
        {1: 2},  # Last = 0: nothing
        {1: 12, 2: 30},  # Up 12, Up 30
        {1: 2, 2: 30},  # Down (2 < 12 − 9)? Off first: 2 < 3 → 0
        {2: 20},  # 20 < 30 − 9 → Down → 20
        {2: 10},  # Down → 10
        {2: 4},  # 4 < 10 − 9? no; off? 4 >= 3: nothing
        {},  # 𝒫 = 0 < 3 with Last 10 → Off
        {},
    ]
    node.pcc = ScriptedPCC(script)  # type: ignore[assignment]
    sent = [node.step(0) for _ in script]
    assert sent == [
        [],
        [Message(1, 10)],
        [],
        [Message(1, 20)],
        [Message(1, 10)],
        [Message(1, 0)],
        [],
        [Message(1, 12), Message(2, 30)],
        [Message(1, 0)],
        [Message(2, 20)],
        [Message(2, 10)],
        [],
        [Message(2, 0)],
        [],
    ]
    assert node.messages_sent == 10 and node.last == {}


def test_down_below_off_then_off_next_step() -> None:
    """Down can leave 0 < Last < (3/11)λW; the next step's Off fires on an unchanged 𝒫."""
    node = LazyUpdateNode(1, Fraction(11, 100), 100, noiseless=True)
    node.pcc = ScriptedPCC([{1: 20}, {1: 5}, {1: 5}, {1: 5}])  # type: ignore[assignment]
    assert [node.step(0) for _ in range(4)] == [[Message(1, 20)], [Message(1, 5)], [], []]
    node = LazyUpdateNode(1, Fraction(11, 100), 100, noiseless=True)
    node.pcc = ScriptedPCC([{1: 40}, {1: 30}, {1: 20}, {1: 10}, {1: 2}])  # type: ignore[assignment]
    out = [node.step(0) for _ in range(5)]
    assert out == [[Message(1, 40)], [Message(1, 30)], [Message(1, 20)], [Message(1, 10)], [Message(1, 0)]]


@pytest.mark.parametrize(
    ("lam", "window", "seed"), [(0.5, 400, 0), (0.3, 1000, 1), (Fraction(3, 4), 1000, 2)]
)
def test_lazy_update_invariant_with_noise_disabled(lam: object, window: int, seed: int) -> None:
    """After every step, for every x: |c_i(x) − 𝒫_t(x)| <= (9/11)λW if c_i(x) > 0, else 𝒫_t(x) <=
    (9/11)λW; and, since the noiseless PCC(λ/11) is within 3W_0 − 2 <= λW/11 here, |c_i(x) −
    count_x| <= (10/11)λW and the aggregator's error is <= (10/11)λkW < λkW."""
    k, universe = 3, 8
    nodes = [LazyUpdateNode(1, lam, window, noiseless=True) for _ in range(k)]
    agg = LazyUpdateAggregator(k, lam, window)
    node_lam = nodes[0].lam
    up = Fraction(9, 11) * node_lam * window
    pcc_slack = 3 * nodes[0].pcc.params.w0 - 2
    assert pcc_slack <= node_lam * window / 11  # the precondition of the (10/11)λW bound holds
    data = streams(k, 4 * window, universe, seed, phase=2 * window)
    kinds: Counter[str] = Counter()
    windows: list[Counter[int]] = [Counter() for _ in range(k)]  # count_x(𝒲_t^(i)), slid per step
    for t in range(4 * window):
        for i, node in enumerate(nodes):
            windows[i][data[i][t]] += 1
            if t >= window:
                windows[i][data[i][t - window]] -= 1
            messages = node.step(data[i][t])
            for m in messages:
                kinds["off" if m.value == 0 else "update"] += 1
            agg.receive(i, messages)
        total_true: Counter[int] = Counter()
        for i, node in enumerate(nodes):
            c_i = agg.node_values(i)
            assert c_i == node.last
            est = node.pcc.estimates()
            true = windows[i]
            total_true.update(true)
            for x in range(universe):
                if c_i.get(x, 0) > 0:
                    assert abs(c_i[x] - est.get(x, 0)) <= up
                else:
                    assert est.get(x, 0) <= up
                assert abs(c_i.get(x, 0) - true[x]) <= Fraction(10, 11) * node_lam * window
        counts = agg.counts()
        for x in range(universe):
            assert abs(counts.get(x, 0) - total_true[x]) <= Fraction(10, 11) * node_lam * k * window
    assert kinds["off"] > 0 and kinds["update"] > 0
    assert agg.messages_received == sum(n.messages_sent for n in nodes) == sum(kinds.values())
    assert agg.words_received == 2 * agg.messages_received


def test_aggregator_sums_latest_values_and_releases_at_the_bar() -> None:
    agg = LazyUpdateAggregator(2, Fraction(1, 10), 100)
    agg.receive(0, [Message(5, 40), Message(6, 12)])
    agg.receive(1, [Message(5, 30), Message("a", 50)])
    agg.receive(0, [Message(5, 35), Message(6, 0)])
    assert agg.counts() == {5: 65, "a": 50}
    assert agg.node_values(0) == {5: 35}
    # bar (θ − λ)kW = (θ − 0.1)·200
    assert agg.heavy_hitters(Fraction(1, 5)) == {5, "a"}  # bar 20
    assert agg.heavy_hitters(Fraction(7, 20)) == {5, "a"}  # bar 50: inclusive
    assert agg.heavy_hitters(Fraction(9, 25)) == {5}  # bar 52
    assert agg.heavy_hitters(Fraction(9, 20)) == set()  # bar 70
    assert agg.messages_received == 6 and agg.words_received == 12
    with pytest.raises(ValueError, match="^node: "):
        agg.receive(2, [])
    with pytest.raises(ValueError, match="^theta: "):
        agg.heavy_hitters(0)
    for kwargs, name in (({"k": 0}, "k"), ({"lam": 1}, "lam"), ({"window": 0}, "window")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            LazyUpdateAggregator(**({"k": 2, "lam": 0.1, "window": 100} | kwargs))


def test_private_node_sends_post_processed_pcc_estimates() -> None:
    """With noise, the messages still follow the rules applied to the node's own 𝒫_t."""
    node = LazyUpdateNode(2000, 0.5, 300, range(8), rng=SeededRandomSource(4))
    data = streams(1, 900, 8, 3)[0]
    last: dict[int, int] = {}
    sent = 0
    for x in data:
        for m in node.step(x):
            assert m.value == 0 or m.value == node.pcc.estimate(m.item)
            last[m.item] = m.value
            sent += 1
        assert {x: v for x, v in last.items() if v} == node.last
    assert sent == node.messages_sent > 0


def test_node_binary_round_trip_continues_with_identical_messages() -> None:
    data = streams(1, 1200, 8, 5)[0]
    reference = LazyUpdateNode(50, 0.5, 300, range(8), noise_key=KEY)
    expected = [reference.step(x) for x in data]
    first = LazyUpdateNode(50, 0.5, 300, range(8), noise_key=KEY)
    for x in data[:457]:
        first.step(x)
    state = first.to_bytes()
    restored = LazyUpdateNode.from_bytes(state, range(8))
    assert restored.to_bytes() == state and restored.last == first.last
    assert [restored.step(x) for x in data[457:]] == expected[457:]
    assert sum(map(len, expected)) > 0
    corrupt = bytearray(state)
    corrupt[len(state) // 2] ^= 1
    with pytest.raises(SketchFormatError):
        LazyUpdateNode.from_bytes(bytes(corrupt), range(8))
    with pytest.raises(SketchFormatError, match="wrong sketch type"):
        LazyUpdateNode.from_bytes(first.pcc.to_bytes(), range(8))
