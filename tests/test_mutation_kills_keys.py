"""The continual-monitor nodes' PCC noise keys (``ContinualSettings.noise_key``) and the
independence of the noise they key.

Written for the mutation run of issue 23 (``python benchmarks/mutation.py keys``), in the style of
``tests/test_keyed_noise_independence.py``. Each node runs its own PCC (Chan–Li–Shi–Xu §3.3) whose
block noise is a keyed DRBG (:class:`~privstream.noise.rng.KeyedRandomSource`); the per-node ε'
claim and the aggregator's sum of k independent node releases need each node's noise independent
of every other node's, and a restarted node (same secret) must redraw its noise identically. The
reference computed here is the definition:

    key(i) = SHA-256(bytes.fromhex(noise_secret) || b":node:" || str(i))

or, TESTS ONLY, when ``hooks`` carry a ``noise_seed``, SHA-256 of the public
``privstream-test-continual:<seed>:<node>``; None (a fresh key) when neither is set.

Independence is checked on the discrete Laplace values the nodes' first level-0 PCC blocks draw
(one per domain element) for the same data, with ``assert_independent`` of
``tests/test_keyed_noise_independence.py``: (1) pairwise distinct; (2) every pair's Pearson
correlation below 6/√n (n = 300 values: for independent vectors r ≈ N(0, 1/n), so a pair fails
with probability ≈ 2e-9, the < 300 pairs here with probability < 1e-6); (3) a chi-square test of
the signs of consecutive nodes' noise at level 1e-4. Secrets are fixed, so the tests are
deterministic; the rates are those of a correct implementation under a random secret.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest
from privstream.operators.continual_logic import ContinualSettings
from privstream.operators.test_hooks import TestHooks

from privstream.continual.blocks import BlockId
from privstream.continual.pcc import PCC
from privstream.noise import discrete as kernels
from tests.test_keyed_noise_independence import assert_independent

SECRET = hashlib.sha256(b"privstream test continual node keys").hexdigest()
OTHER_SECRET = hashlib.sha256(b"privstream test continual node keys, another submission").hexdigest()
NODES = 16
DOMAIN = 300
_LAPLACE = kernels._discrete_laplace


def settings(noise_secret: str = SECRET, nodes: int = NODES) -> ContinualSettings:
    return ContinualSettings(
        epsilon=4.0, lam=0.25, window=8, universe=12, nodes=nodes, theta=0.3, step_ms=1000,
        window_items=40, noise_secret=noise_secret,
    )  # fmt: skip


def reference_key(secret_hex: str, node: int) -> bytes:
    """SHA-256(secret bytes || ":node:" || decimal node id), computed here from its definition."""
    h = hashlib.sha256()
    h.update(bytes.fromhex(secret_hex))
    h.update(b":node:")
    h.update(f"{node:d}".encode("ascii"))
    return h.digest()


def seeded_key(seed: int, node: int) -> bytes:
    return hashlib.sha256(f"privstream-test-continual:{seed}:{node}".encode()).digest()


class BlockNoise:
    """The discrete Laplace values drawn by each PCC block release, recorded where they are drawn."""

    def __init__(self) -> None:
        self.current: list[int] | None = None

    def laplace(self, t: int, s: int, rng: object) -> int:
        value = _LAPLACE(t, s, rng)  # type: ignore[arg-type]
        assert self.current is not None
        self.current.append(value)
        return value


@pytest.fixture
def block_noise(monkeypatch: pytest.MonkeyPatch) -> Iterator[BlockNoise]:
    import privstream.mechanisms.domain_topk as domain_topk

    rec = BlockNoise()
    monkeypatch.setattr(domain_topk, "_discrete_laplace", rec.laplace)
    yield rec


def first_block_noise(rec: BlockNoise, key: bytes | None) -> np.ndarray:
    """The noise of a node's first level-0 block (W = 16, λ = 1/4: one step per level-0 block),
    the same data (item 7) for every node."""
    pcc = PCC(1, Fraction(1, 4), 16, domain=range(DOMAIN), noise_key=key)
    rec.current = []
    blocks = pcc.step(7)
    assert BlockId(0, 1) in blocks
    drawn, rec.current = rec.current, None
    assert len(drawn) == DOMAIN  # PMG over the declared domain: one draw per element
    return np.array(drawn)


def test_node_keys_are_sha256_of_the_secret_and_the_node() -> None:
    """The exact key of every node under two secrets (and a short one) equals the formula; the
    key is a 32-byte digest, never the secret itself."""
    for secret in (SECRET, OTHER_SECRET, "00", "ab" * 40):
        s = settings(secret)
        for node in (*range(NODES), 123, 10_000):
            key = s.noise_key(node)
            assert key == reference_key(secret, node)
            assert isinstance(key, bytes) and len(key) == 32
            assert key == s.noise_key(node, None) == s.noise_key(node, TestHooks())


def test_distinct_nodes_and_secrets_get_distinct_keys_and_replays_the_same() -> None:
    a, again, other = settings(), settings(), settings(OTHER_SECRET)
    keys = [a.noise_key(i) for i in range(NODES)]
    other_keys = [other.noise_key(i) for i in range(NODES)]
    assert len(set(keys)) == NODES and len(set(other_keys)) == NODES
    assert not set(keys) & set(other_keys)  # another submission's secret: no key shared
    assert keys == [again.noise_key(i) for i in range(NODES)]  # a restarted node: the same key
    # node 1 vs 10/11 and 1 vs 11: no concatenation ambiguity with the separator
    assert a.noise_key(1) != a.noise_key(11) != a.noise_key(10)


def test_the_hooks_seed_wins_only_when_set() -> None:
    """TESTS ONLY: ``hooks`` with a ``noise_seed`` give the seeded key (whatever the secret); hooks
    without a seed, or no hooks, fall back to the secret; neither: None (the PCC draws a fresh
    key)."""
    with_secret, without = settings(), settings("")
    for node in range(4):
        for seed in (0, 3, 99):
            hooks = TestHooks(noise_seed=seed)
            assert with_secret.noise_key(node, hooks) == seeded_key(seed, node)
            assert without.noise_key(node, hooks) == seeded_key(seed, node)
            assert seeded_key(seed, node) != reference_key(SECRET, node)
        assert with_secret.noise_key(node, TestHooks()) == reference_key(SECRET, node)
        assert with_secret.noise_key(node) == reference_key(SECRET, node)
        assert without.noise_key(node) is None
        assert without.noise_key(node, TestHooks()) is None
        assert without.noise_key(node, None) is None


def test_distinct_nodes_draw_independent_pcc_noise_and_a_replay_the_same(block_noise: BlockNoise) -> None:
    """Every node fed the same step: their first block releases draw independent noise (so the
    aggregator sums k independent releases); the same node under the same secret (a restart)
    redraws exactly the same noise; another secret draws independent noise."""
    s = settings()
    per_node = [first_block_noise(block_noise, s.noise_key(i)) for i in range(NODES)]
    assert_independent(per_node, "continual nodes")
    replay = settings()
    for node in (0, 7, NODES - 1):
        assert np.array_equal(first_block_noise(block_noise, replay.noise_key(node)), per_node[node])
    other = settings(OTHER_SECRET)
    mixed = [first_block_noise(block_noise, other.noise_key(i)) for i in range(8)] + per_node[:8]
    assert_independent(mixed, "continual secrets")


def test_seeded_node_keys_draw_independent_noise_per_node(block_noise: BlockNoise) -> None:
    """The test hooks' seeded keys are per node too (distinct nodes, independent noise)."""
    s = settings("")
    hooks = TestHooks(noise_seed=3)
    per_node = [first_block_noise(block_noise, s.noise_key(i, hooks)) for i in range(NODES)]
    assert_independent(per_node, "seeded continual nodes")
