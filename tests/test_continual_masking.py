"""Pairwise masking for aggregator-oblivious sums (Kursawe–Danezis–Kohlweiss style; the private
aggregation used by PDCH-BF, Chan–Li–Shi–Xu §4.1/§4.3).

Keys are derived deterministically from fixed seeds; the statistical tests are therefore deterministic
and their stated false-failure rate is the probability of failing for random keys.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from scipy import stats

from privstream.continual.masking import (
    CELL_BYTES,
    DecodeRangeError,
    LabelReusedError,
    MaskingError,
    MaskingNode,
    MissingContributionError,
    Roster,
    decode_signed,
    encode_signed,
    generate_private_key,
    public_key_bytes,
    unmask_sum,
)
from privstream.noise.rng import SeededRandomSource

ALPHA = 1e-4  # false-failure rate of each chi-square test


def fixed_key(tag: str) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(hashlib.sha256(f"masking-test-{tag}".encode()).digest())


def make_nodes(k: int, tag: str = "", ids: list[int] | None = None) -> tuple[Roster, dict[int, MaskingNode]]:
    ids = ids if ids is not None else list(range(1, k + 1))
    keys = {i: fixed_key(f"{tag}-{i}") for i in ids}
    roster = Roster.from_private_keys(keys)
    return roster, {i: MaskingNode(i, keys[i], roster) for i in ids}


def random_vector(tag: str, m: int, bound: int) -> list[int]:
    rng = SeededRandomSource(tag)
    return [rng.randbelow(2 * bound + 1) - bound for _ in range(m)]


@pytest.mark.parametrize("k", [2, 3, 5])
def test_masked_sum_over_all_nodes_equals_plain_sum(k: int) -> None:
    roster, nodes = make_nodes(k, "sum")
    values = {i: random_vector(f"v-{k}-{i}", 300, 10**6) for i in nodes}
    masked = {i: nodes[i].mask(b"period-1", values[i]) for i in nodes}
    plain = [sum(values[i][c] for i in nodes) for c in range(300)]
    assert unmask_sum(masked, roster).tolist() == plain
    # the masked vectors themselves are not the values
    assert all(masked[i].view(np.int64).tolist() != values[i] for i in nodes)


def test_extreme_values_round_trip() -> None:
    roster, nodes = make_nodes(5, "extreme")
    m = roster.default_max_abs()
    vals = [m, -m, 0, 1, -1]
    masked = {i: nodes[i].mask(b"L", vals) for i in nodes}
    assert unmask_sum(masked, roster).tolist() == [5 * v for v in vals]
    with pytest.raises(MaskingError):
        nodes[1].mask(b"L2", [m + 1])


def test_masks_cancel_exactly() -> None:
    for k in (2, 5):
        _, nodes = make_nodes(k, "cancel")
        total = np.zeros(1000, dtype=np.uint64)
        for node in nodes.values():
            total += node.mask_for(b"cancel-label", 1000)
        assert not total.any()


def test_node_order_not_registration_order_fixes_signs() -> None:
    roster, nodes = make_nodes(3, "order", ids=[42, 7, 1000])
    assert roster.node_ids == (7, 42, 1000)
    masked = {i: n.mask(b"p", [i, 2 * i]) for i, n in nodes.items()}
    assert unmask_sum(masked, roster).tolist() == [1049, 2098]


def test_single_masked_table_of_zeros_looks_uniform() -> None:
    """k = 3, node 2 masks an all-zeros vector of 2^16 cells. Chi-square on the top byte and on the
    bottom byte (256 bins, 256 expected per bin) accepts uniformity. False-failure rate 2·ALPHA."""
    _, nodes = make_nodes(3, "uniform")
    masked = nodes[2].mask(b"zeros", np.zeros(2**16, dtype=np.int64))
    top = np.bincount((masked >> np.uint64(56)).astype(np.int64), minlength=256)
    low = np.bincount((masked & np.uint64(0xFF)).astype(np.int64), minlength=256)
    assert stats.chisquare(top).pvalue > ALPHA
    assert stats.chisquare(low).pvalue > ALPHA
    assert len(np.unique(masked)) == masked.size  # no repeated 64-bit word (collision prob ~ 2^-33)


def test_uniformity_check_has_power() -> None:
    """The same chi-square rejects an unmasked table of small counts (the top byte is always 0)."""
    plain = encode_signed(np.arange(2**16) % 1000, 2**62)
    top = np.bincount((plain >> np.uint64(56)).astype(np.int64), minlength=256)
    assert stats.chisquare(top).pvalue < ALPHA


def test_reused_label_is_refused() -> None:
    _, nodes = make_nodes(2, "reuse")
    node = nodes[1]
    node.mask(b"block-7", [1, 2, 3])
    with pytest.raises(LabelReusedError):
        node.mask(b"block-7", [1, 2, 3])
    with pytest.raises(LabelReusedError):
        node.mask(b"block-7", [4])
    assert node.used_labels == frozenset({b"block-7"})
    # a refused request does not consume its label
    with pytest.raises(MaskingError):
        node.mask(b"block-8", [2**63])
    node.mask(b"block-8", [0])
    with pytest.raises(TypeError):
        node.mask(b"", [0])


def test_masks_differ_between_labels_and_nodes() -> None:
    _, nodes = make_nodes(3, "labels")
    a = nodes[1].mask_for(b"label-A", 64)
    b = nodes[1].mask_for(b"label-B", 64)
    c = nodes[2].mask_for(b"label-A", 64)
    assert not np.any(a == b)  # each equal word has probability 2^-64
    assert not np.any(a == c)
    assert np.array_equal(a, nodes[1].mask_for(b"label-A", 64))  # deterministic given the label
    # prefix-consistent: cell c's mask does not depend on the vector length
    assert np.array_equal(nodes[1].mask_for(b"label-A", 10), a[:10])


def test_missing_node_is_refused_not_decoded() -> None:
    roster, nodes = make_nodes(5, "missing")
    masked = {i: n.mask(b"p", [i] * 4) for i, n in nodes.items()}
    partial = {i: v for i, v in masked.items() if i != 3}
    with pytest.raises(MissingContributionError, match=r"\[3\]"):
        unmask_sum(partial, roster)
    # an outsider's vector is refused too
    with pytest.raises(MaskingError):
        unmask_sum(masked | {99: masked[1]}, roster)
    assert unmask_sum(masked, roster).tolist() == [15] * 4


def test_mismatched_labels_or_lengths_are_refused() -> None:
    roster, nodes = make_nodes(2, "mismatch")
    a = nodes[1].mask(b"x", [1, 2, 3])
    with pytest.raises(MaskingError):
        unmask_sum({1: a, 2: nodes[2].mask(b"x2", [1, 2])}, roster)
    # different labels: masks do not cancel; with a tight declared bound the garbage is refused
    tight_roster, tight = make_nodes(2, "tight")
    t1 = MaskingNode(1, fixed_key("tight-1"), tight_roster, max_abs=1000)
    t2 = MaskingNode(2, fixed_key("tight-2"), tight_roster, max_abs=1000)
    with pytest.raises(DecodeRangeError):
        unmask_sum({1: t1.mask(b"one", [5] * 8), 2: t2.mask(b"two", [5] * 8)}, tight_roster, max_abs=1000)
    assert tight[1].max_abs == tight_roster.default_max_abs()


def test_roster_and_key_checks() -> None:
    k1, k2 = fixed_key("r1"), fixed_key("r2")
    roster = Roster.from_private_keys({1: k1, 2: k2})
    with pytest.raises(ValueError):
        MaskingNode(1, k2, roster)  # private key does not match the registered public key
    with pytest.raises(ValueError):
        MaskingNode(3, k1, roster)
    with pytest.raises(ValueError):
        Roster({1: public_key_bytes(k1)})
    with pytest.raises(ValueError):
        Roster({1: public_key_bytes(k1), 2: public_key_bytes(k1)})
    with pytest.raises(ValueError):
        Roster({1: b"short", 2: public_key_bytes(k2)})
    fresh = generate_private_key()
    assert len(public_key_bytes(fresh)) == 32 and public_key_bytes(fresh) != public_key_bytes(k1)


def test_signed_encoding_round_trip_and_range() -> None:
    vals = [0, 1, -1, 2**62, -(2**62)]
    enc = encode_signed(vals, 2**62)
    assert enc.dtype == np.uint64 and enc.tolist()[2] == 2**64 - 1
    assert decode_signed(enc, 2**62).tolist() == vals
    with pytest.raises(DecodeRangeError):
        decode_signed(enc, 2**62 - 1)
    assert encode_signed([-3, 4], 10).tolist() == encode_signed(np.array([-3, 4]), 10).tolist()


def test_wire_size_per_cell() -> None:
    """One masked cell is one 8-byte word, vs 128 bytes for the paper's 1024-bit ciphertexts (§5)."""
    _, nodes = make_nodes(2, "size")
    masked = nodes[1].mask(b"s", [0] * 100)
    assert CELL_BYTES == 8 and masked.nbytes == 100 * CELL_BYTES
