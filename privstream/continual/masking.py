"""Aggregator-oblivious sums by pairwise masking (the Kursawe–Danezis–Kohlweiss construction that Chan,
Li, Shi, Xu list as one of the private-aggregation schemes usable in PDCH-BF, §4.1 and §4.3).

Setup (once, before any period):

1. Every node i generates an X25519 key pair with :func:`generate_private_key` (the ``cryptography``
   package's CSPRNG) and keeps the private key secret.
2. The public keys are published on a bulletin board / registration service that maps node ids to
   32-byte raw public keys (:class:`Roster`). **That board must be authenticated**: an aggregator that
   could substitute a node's public key would share that node's pairwise keys and unmask it. Every node
   and the aggregator must use the same roster.
3. Each node derives, for every other node j, the pairwise key
   ``K_ij = HKDF-SHA256(X25519(sk_i, pk_j), salt = "privstream/masking/v1",
   info = "pairwise" ‖ min(i, j) ‖ max(i, j) ‖ pk_min ‖ pk_max)`` (32 bytes; both ends get the same key).

Masking a period (:meth:`MaskingNode.mask`). For a period label L (bytes) and a vector of m integers,
node i sends ``c_i[cell] = v_i[cell] + mask_i[cell] mod 2^64`` with

``mask_i[cell] = Σ_{j > i} PRF(K_ij, L ‖ cell) − Σ_{j < i} PRF(K_ij, L ‖ cell)  (mod 2^64)``.

The PRF is AES-256 in counter mode: the per-period key is ``HMAC-SHA256(K_ij, "period" ‖ len(L) ‖ L)``
and ``PRF(K_ij, L ‖ cell)`` is bytes ``[8·cell, 8·cell + 8)`` of the keystream (zero nonce, little-endian
uint64). Each pair's terms appear once with ``+`` and once with ``−``, so the masks of all k nodes sum to
0 and the aggregator (:func:`unmask_sum`) recovers exactly ``Σ_i v_i[cell] mod 2^64`` per cell.

Values are signed integers encoded as residues mod 2^64 (two's complement). A node refuses values with
``|v| > max_abs`` (default ``(2^63 − 1) // k``), so the true sum of k values lies in
``[−k·max_abs, k·max_abs] ⊆ (−2^63, 2^63)`` and decodes exactly; a decoded sum outside that range can
only come from inconsistent or corrupted messages and is refused.

Labels must never be reused: two maskings under the same label with different data would reveal the
difference of the data. A :class:`MaskingNode` refuses a label it has already used
(:class:`LabelReusedError`). It remembers labels only in memory: **persisting used labels across
restarts (or using labels that cannot repeat, e.g. a fresh session id per run) is the caller's job.**

Trust assumptions (what aggregator obliviousness, Def. 4 of the paper, means here):

* The aggregator is honest-but-curious; it sees every masked vector and learns per-cell sums over all
  k nodes mod 2^64, and nothing else (under the PRF and the decisional Diffie–Hellman assumption on
  X25519). A single node's masked vector is computationally indistinguishable from uniform whenever at
  least one other node's pairwise key is unknown to the observer.
* Nodes do not collude with the aggregator. A coalition of the aggregator with ``c`` nodes learns the
  coalition's own values and the sum of the remaining ``k − c`` honest nodes' values per cell, nothing
  more; in particular the aggregator plus ``k − 2`` nodes learns only the remaining pair's sum.
* Malicious behaviour (a node sending garbage, the aggregator dropping messages) is not prevented:
  garbage corrupts the sum, and is detected only when it leaves the decodable range.

Missing nodes: every node's message is needed to cancel the masks. With even one node missing, the
period cannot be decoded (:func:`unmask_sum` raises :class:`MissingContributionError`) and no partial
sum is ever produced. The scheme has no fault tolerance; recovering would need the present nodes to
reveal their pairwise PRF outputs with the missing node for that label, an interactive step outside the
one-way model of the paper. A node that was only late can still send its message (resending the
identical message is safe; re-masking different data under the same label is not).
"""

from __future__ import annotations

import hmac as _hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from privstream.validation import check_int

MODULUS = 2**64
"""Masked values and sums are residues mod 2^64 (one 8-byte word per cell)."""

CELL_BYTES = 8
"""Bytes per masked cell on the wire."""

PUBLIC_KEY_BYTES = 32

_SALT = b"privstream/masking/v1"
_NONCE = bytes(16)


class MaskingError(ValueError):
    """A masking or unmasking request was refused."""


class LabelReusedError(MaskingError):
    """A node was asked to mask under a period label it has already used."""


class MissingContributionError(MaskingError):
    """Not every node's masked vector is present, so the sum cannot be decoded."""


class DecodeRangeError(MaskingError):
    """A decoded sum lies outside the range that honest inputs can produce."""


def generate_private_key() -> X25519PrivateKey:
    """A fresh X25519 private key from the ``cryptography`` package's CSPRNG (setup step 1)."""
    return X25519PrivateKey.generate()


def public_key_bytes(private_key: X25519PrivateKey) -> bytes:
    """The 32-byte raw public key to publish on the authenticated bulletin board (setup step 2)."""
    return private_key.public_key().public_bytes_raw()


def _check_node_id(node_id: int) -> int:
    return check_int("node_id", node_id, minimum=0, below=2**32, type_error=ValueError)


@dataclass(frozen=True)
class Roster:
    """The authenticated public-key directory: node id → 32-byte raw X25519 public key.

    The aggregator needs it to know the full set of k nodes whose messages must all be present.
    """

    keys: Mapping[int, bytes]

    def __post_init__(self) -> None:
        keys = {_check_node_id(i): bytes(pk) for i, pk in self.keys.items()}
        if len(keys) < 2:
            raise ValueError("pairwise masking needs at least 2 nodes")
        for i, pk in keys.items():
            if len(pk) != PUBLIC_KEY_BYTES:
                raise ValueError(f"public key of node {i} has {len(pk)} bytes, expected {PUBLIC_KEY_BYTES}")
        if len(set(keys.values())) != len(keys):
            raise ValueError("two nodes registered the same public key")
        object.__setattr__(self, "keys", dict(sorted(keys.items())))

    @classmethod
    def from_private_keys(cls, private_keys: Mapping[int, X25519PrivateKey]) -> Roster:
        """Convenience for tests and single-process simulations."""
        return cls({i: public_key_bytes(sk) for i, sk in private_keys.items()})

    @property
    def node_ids(self) -> tuple[int, ...]:
        """The node ids in increasing order (the order that fixes each pair's mask sign)."""
        return tuple(self.keys)

    @property
    def k(self) -> int:
        """The number of nodes."""
        return len(self.keys)

    def default_max_abs(self) -> int:
        """``(2^63 − 1) // k``: the largest per-node |value| for which the k-node sum cannot wrap."""
        return (2**63 - 1) // self.k


def _resolve_max_abs(roster: Roster, max_abs: int | None) -> int:
    limit = roster.default_max_abs()
    if max_abs is None:
        return limit
    return check_int("max_abs", max_abs, minimum=0, below=limit + 1, type_error=ValueError)


def encode_signed(values: Iterable[int] | np.ndarray, max_abs: int) -> np.ndarray:
    """Signed ints as uint64 residues mod 2^64 (two's complement); refuses ``|v| > max_abs``."""
    arr = np.asarray(values)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.integer):
        ints = [int(v) for v in arr.reshape(-1)]
        if any(abs(v) > max_abs for v in ints):
            raise MaskingError(f"a value exceeds the encodable magnitude {max_abs}")
        return np.array([v % MODULUS for v in ints], dtype=np.uint64)
    flat = arr.reshape(-1)
    if flat.dtype == np.uint64:
        if flat.size and int(flat.max()) > max_abs:
            raise MaskingError(f"a value exceeds the encodable magnitude {max_abs}")
        return flat.astype(np.uint64, copy=True)
    signed = flat.astype(np.int64)
    if signed.size and (int(signed.max()) > max_abs or int(signed.min()) < -max_abs):
        raise MaskingError(f"a value exceeds the encodable magnitude {max_abs}")
    return signed.view(np.uint64).copy()


def decode_signed(residues: np.ndarray, max_abs_sum: int) -> np.ndarray:
    """uint64 residues back to int64 (two's complement); refuses any ``|s| > max_abs_sum``."""
    signed = np.asarray(residues, dtype=np.uint64).view(np.int64)
    if signed.size:
        lo, hi = int(signed.min()), int(signed.max())
        if hi > max_abs_sum or lo < -max_abs_sum:
            raise DecodeRangeError(
                f"decoded sum outside [-{max_abs_sum}, {max_abs_sum}]: the messages are inconsistent "
                "(different labels or lengths, corrupted cells, or a wrong roster)"
            )
    return signed.copy()


def _pairwise_key(shared: bytes, i: int, j: int, pk_i: bytes, pk_j: bytes) -> bytes:
    lo, hi = (i, j) if i < j else (j, i)
    pk_lo, pk_hi = (pk_i, pk_j) if i < j else (pk_j, pk_i)
    info = b"pairwise" + lo.to_bytes(4, "big") + hi.to_bytes(4, "big") + pk_lo + pk_hi
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=info).derive(shared)


def _prf_stream(pair_key: bytes, label: bytes, cells: int) -> np.ndarray:
    """``PRF(K_ij, L ‖ cell)`` for ``cell = 0 .. cells−1``, as uint64 (AES-256-CTR keystream)."""
    period_key = _hmac.new(pair_key, b"period" + len(label).to_bytes(4, "big") + label, "sha256").digest()
    encryptor = Cipher(algorithms.AES(period_key), modes.CTR(_NONCE)).encryptor()
    stream = encryptor.update(bytes(CELL_BYTES * cells)) + encryptor.finalize()
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64)


def _check_label(label: bytes) -> bytes:
    if not isinstance(label, bytes | bytearray) or not label:
        raise TypeError("period labels must be non-empty bytes")
    return bytes(label)


class MaskingNode:
    """One node's side of the pairwise-masking scheme (see the module docstring for setup and trust).

    Holds the node's pairwise keys with every other roster member and the set of period labels it has
    used. Labels are remembered in memory only; persisting them is the caller's job.
    """

    def __init__(
        self, node_id: int, private_key: X25519PrivateKey, roster: Roster, *, max_abs: int | None = None
    ) -> None:
        self.node_id = _check_node_id(node_id)
        self.roster = roster
        if node_id not in roster.keys:
            raise ValueError(f"node {node_id} is not in the roster")
        own_pk = public_key_bytes(private_key)
        if roster.keys[node_id] != own_pk:
            raise ValueError(f"the roster's public key for node {node_id} does not match its private key")
        self.max_abs = _resolve_max_abs(roster, max_abs)
        self._pair_keys: dict[int, bytes] = {}
        for j, pk_j in roster.keys.items():
            if j == node_id:
                continue
            shared = private_key.exchange(X25519PublicKey.from_public_bytes(pk_j))
            self._pair_keys[j] = _pairwise_key(shared, node_id, j, own_pk, pk_j)
        self._used: set[bytes] = set()

    @property
    def used_labels(self) -> frozenset[bytes]:
        """The labels this node object has masked under (to be persisted by the caller)."""
        return frozenset(self._used)

    def mask_for(self, label: bytes, cells: int) -> np.ndarray:
        """``mask_i`` for ``cells`` cells under ``label`` (uint64). Does not consume the label; used by
        :meth:`mask` and by tests."""
        total = np.zeros(cells, dtype=np.uint64)
        for j, key in self._pair_keys.items():
            prf = _prf_stream(key, label, cells)
            if self.node_id < j:
                total += prf  # uint64 arithmetic wraps mod 2^64
            else:
                total -= prf
        return total

    def mask(self, label: bytes, values: Sequence[int] | np.ndarray) -> np.ndarray:
        """``encode(v) + mask_i(L) mod 2^64`` for every cell (zeros included). Refuses a used label and
        any ``|v| > max_abs``; the label is consumed only if masking succeeds."""
        label = _check_label(label)
        if label in self._used:
            raise LabelReusedError(f"node {self.node_id} already masked under period label {label!r}")
        encoded = encode_signed(values, self.max_abs)
        masked = encoded + self.mask_for(label, encoded.size)
        self._used.add(label)
        return masked


def unmask_sum(masked: Mapping[int, np.ndarray], roster: Roster, *, max_abs: int | None = None) -> np.ndarray:
    """``Σ_i v_i`` per cell (int64) from one masked vector per roster node (all for the same label).

    Refuses (:class:`MissingContributionError`) unless every roster node — and nobody else — is present;
    refuses vectors of different lengths; refuses (:class:`DecodeRangeError`) a sum outside
    ``[−k·max_abs, k·max_abs]``.
    """
    limit = _resolve_max_abs(roster, max_abs)
    present = set(masked)
    missing = sorted(set(roster.keys) - present)
    if missing:
        raise MissingContributionError(f"cannot decode: no masked vector from node(s) {missing}")
    unknown = sorted(present - set(roster.keys))
    if unknown:
        raise MaskingError(f"masked vectors from node(s) {unknown} outside the roster")
    arrays = [np.asarray(masked[i], dtype=np.uint64) for i in roster.node_ids]
    lengths = {a.shape for a in arrays}
    if len(lengths) != 1:
        raise MaskingError(f"masked vectors have different shapes: {sorted(lengths)}")
    total = np.zeros(arrays[0].shape, dtype=np.uint64)
    for a in arrays:
        total += a
    return decode_signed(total, roster.k * limit)
