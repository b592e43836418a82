"""PDCH-LU: distributed continual heavy hitters with lazy updates (Chan, Li, Shi, Xu, "Differentially
Private Continual Monitoring of Heavy Hitters from Distributed Streams", §3.4, Alg. 2 and Theorem 1).

A node runs PCC(ε, λ/11) (λ/11 is then rounded down to a power of 1/2 by PCC) on its stream and,
after every step, tests each item x with 𝒫_t(x) > 0 or Last(x) > 0 against the rules, IN THIS ORDER
(λ is the node's λ, W the window; at most one rule fires per item and step):

* Up:   𝒫_t(x) > Last(x) + (9/11)λW           → send ⟨x, 𝒫_t(x)⟩, Last(x) ← 𝒫_t(x);
* Off:  Last(x) > 0 and 𝒫_t(x) < (3/11)λW     → send ⟨x, 0⟩,      Last(x) ← 0;
* Down: 𝒫_t(x) < Last(x) − (9/11)λW           → send ⟨x, 𝒫_t(x)⟩, Last(x) ← 𝒫_t(x).

The aggregator keeps the latest value c_i(x) from each node i, sums c(x) = Σ_i c_i(x) and releases
{x : c(x) >= (θ − λ)kW}.

Many items per step (:meth:`LazyUpdateNode.step_items`). The paper's λW is "λ times the items per
node per window", which is λW only under Remark 1 (one item per step). With several items per step the
operator declares ``window_items``: a PUBLIC bound or estimate of the items per node per window, fixed
in advance and never computed from the data. It replaces W in the Up/Off/Down thresholds and in the
release bar (θ − λ)k·window_items, which therefore stay data-independent, so the transcript is still
post-processing of PCC and keeps its guarantee (Σ_i ε_i < ε for replacing, adding or removing one
item of one step; :mod:`privstream.continual.pcc`). Theorem 1's accuracy (error <= (10/11)λ per window
and node, in units of items) then holds with W replaced by window_items only while each node's true
window holds at most window_items items and PCC is within λ/11 of the true window count; PCC's own
error grows with the true items in the window (Lemma 3 in units of items, not steps). If more items
arrive the thresholds are too small (more messages, same privacy); if far fewer, the thresholds and
the bar are too large relative to the window and heavy hitters may be missed. The transcript is a deterministic function of (𝒫_t)_t with public
thresholds, so by post-processing of Lemma 3 each node's messages are ε-DP (event-level, replacing
one item of that node's stream). Messages go in the clear (no aggregator obliviousness).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import NamedTuple, Unpack

import numpy as np

from privstream.continual.blocks import LU_NODE_STATE_CODE, check_lambda, round_lambda
from privstream.continual.pcc import (
    PCC,
    ContinualGuarantee,
    NoiseOptions,
    continual_guarantee,
    heavy_hitter_bar,
    pack_blobs,
    unpack_blobs,
)
from privstream.mechanisms.domain_topk import Domain
from privstream.noise.rng import RandomSource
from privstream.sketches import Dummy, Item, item_order_key
from privstream.sketches.binary_format import (
    SketchFormatError,
    decode_counters,
    decode_envelope,
    encode_counters,
    encode_envelope,
    require,
)
from privstream.validation import check_int

UP_FRACTION, OFF_FRACTION = Fraction(9, 11), Fraction(3, 11)

#: Words per message ⟨x, c⟩: the item and the value (the paper counts O(1) words per message).
WORDS_PER_MESSAGE = 2


class Message(NamedTuple):
    """⟨x, c⟩: the node's new value c (``value``) for item x (c = 0: Off)."""

    item: Item
    value: int


def check_window_items(window_items: object) -> int | None:
    """``window_items`` (None, or a positive int: the public items per node per window)."""
    if window_items is None:
        return None
    return check_int("window_items", window_items, type_error=ValueError)


class LazyUpdateNode:
    """One PDCH-LU node (Alg. 2): ``step(item)`` / ``step_items(items)`` return the messages sent at
    this step.

    ``domain``, ``noise_key``, ``rng`` (TESTS ONLY) and ``noiseless`` (NOT PRIVATE: the paper's
    DCH-LU baseline and tests) are passed to its PCC(ε, λ/11). ``window_items``: the PUBLIC items per
    node per window that replaces W in the thresholds (module docstring); None: W (one item per
    step)."""

    def __init__(
        self,
        epsilon: object,
        lam: object,
        window: object,
        domain: Domain | None = None,
        window_items: int | None = None,
        **options: Unpack[NoiseOptions],
    ) -> None:
        lam = check_lambda(lam)
        items = check_window_items(window_items)
        self._setup(lam, PCC(epsilon, lam / 11, window, domain, **options), {}, 0, items)

    def _setup(
        self, lam: Fraction, pcc: PCC, last: dict[Item, int], messages_sent: int, window_items: int | None
    ) -> None:
        self.lam, self.pcc, self.window = lam, pcc, pcc.params.window
        self.window_items = window_items
        self.set_scale(self.window if window_items is None else window_items)
        self._last = last
        self.messages_sent = messages_sent

    def set_scale(self, items: Fraction | int) -> None:
        """Set the thresholds' item scale (the paper's W): (9/11)λ·items for Up and Down, (3/11)λ·items
        for Off. The constructor uses ``window_items`` or W; a caller may only pass a public,
        data-independent value or post-processing of DP releases (e.g. the noisy window size of
        :mod:`privstream.continual.variants`)."""
        self.scale = Fraction(items)
        self.up_threshold = UP_FRACTION * self.lam * self.scale  #: (9/11)λW, Up and Down
        self.off_threshold = OFF_FRACTION * self.lam * self.scale  #: (3/11)λW, Off
        # the rules compare integers: d > u ⇔ d > ⌊u⌋ and v < o ⇔ v < ⌈o⌉ for integers d, v (exact)
        self._up_floor = math.floor(self.up_threshold)
        self._off_ceil = math.ceil(self.off_threshold)

    @property
    def last(self) -> dict[Item, int]:
        """Last(x): the values last sent (non-zero only)."""
        return dict(self._last)

    def step(self, item: object) -> list[Message]:
        """Feed the step's one item to PCC, then apply Up, Off, Down (in that order) per item.
        Exactly ``step_items([item])``."""
        return self.step_items([item])

    def step_items(self, items: Sequence[object] | np.ndarray) -> list[Message]:
        """One time step with any number of items (:meth:`PCC.step_items`), then Up, Off, Down per
        item, as in :meth:`step`."""
        self._advance(items)
        estimates = self.pcc.estimates()
        out = []
        for x in sorted(estimates.keys() | self._last.keys(), key=item_order_key):
            value = estimates.get(x, 0)
            sent = self._rules(value, self._last.get(x, 0))
            if sent is not None:
                out.append(Message(x, sent))
                if sent:
                    self._last[x] = sent
                else:
                    self._last.pop(x, None)
        self.messages_sent += len(out)
        return out

    def _advance(self, items: Sequence[object] | np.ndarray) -> None:
        """Feed one step's items to the estimator (a hook for the practical variants)."""
        self.pcc.step_items(items)

    def _rules(self, value: int, last: int) -> int | None:
        """The value sent for an item with estimate ``value`` and Last ``last`` (None: nothing)."""
        if value - last > self._up_floor:  # Up: 𝒫_t(x) > Last(x) + (9/11)λW
            return value
        if last > 0 and value < self._off_ceil:  # Off: 𝒫_t(x) < (3/11)λW
            return 0
        if last - value > self._up_floor:  # Down: 𝒫_t(x) < Last(x) − (9/11)λW
            return value
        return None

    @property
    def guarantee(self) -> ContinualGuarantee:
        """Each node's whole transcript: the ε of its PCC(ε, λ/11) (post-processing), δ = 0."""
        return continual_guarantee(
            self.pcc.params,
            self.pcc.noiseless,
            "Chan-Li-Shi-Xu Theorem 1 (PDCH-LU): the messages are a deterministic function of "
            "PCC(eps, lambda/11)'s estimates with public thresholds; Lemma 3 and post-processing",
        )

    def to_bytes(self) -> bytes:
        """Checkpointable state (type byte ``LU_NODE_STATE_CODE``): λ, Last, the message count and
        the PCC state. SECRET like :meth:`PCC.to_bytes`."""
        lam = f"{self.lam.numerator}/{self.lam.denominator}".encode()
        items = b"" if self.window_items is None else str(self.window_items).encode()
        blobs = [lam, encode_counters(self._last), self.pcc.to_bytes(), items]
        return encode_envelope(LU_NODE_STATE_CODE, [self.messages_sent], pack_blobs(blobs))

    @classmethod
    def from_bytes(
        cls, data: bytes, domain: Domain | None = None, *, rng: RandomSource | None = None
    ) -> LazyUpdateNode:
        """Restore :meth:`to_bytes` (``domain`` and ``rng`` as for :meth:`PCC.from_bytes`)."""
        (messages,), payload = decode_envelope(data, LU_NODE_STATE_CODE, 1, "PDCH-LU node state")
        blobs = unpack_blobs(payload)
        require(len(blobs) in (3, 4), "wrong number of state sections")  # 3: written before window_items
        window_items = None
        if len(blobs) == 4 and blobs[3]:
            try:
                window_items = check_window_items(int(blobs[3].decode("ascii")))
            except (UnicodeDecodeError, ValueError):
                raise SketchFormatError("bad window_items") from None
        try:
            lam = check_lambda(Fraction(blobs[0].decode("ascii")))
        except (UnicodeDecodeError, ValueError, ZeroDivisionError):
            raise SketchFormatError("bad lam") from None
        pcc = PCC.from_bytes(blobs[2], domain, rng=rng)
        require(pcc.params.lam == round_lambda(lam / 11), "lam disagrees with the PCC state")
        last = decode_counters(blobs[1])
        require(all(type(x) is not Dummy and v > 0 for x, v in last.items()), "Last values must be > 0")
        node = cls.__new__(cls)
        node._setup(lam, pcc, last, messages, window_items)  # type: ignore[arg-type]
        return node


class LazyUpdateAggregator:
    """PDCH-LU's aggregator for ``k`` nodes: c_i(x) ← c on message ⟨x, c⟩ from node i;
    ``counts()`` = Σ_i c_i(x); ``heavy_hitters(θ)`` = {x : c(x) >= (θ − λ)k·W}, with W replaced by the
    public ``window_items`` (items per node per window) when given."""

    def __init__(self, k: object, lam: object, window: object, window_items: int | None = None) -> None:
        self.k = check_int("k", k, type_error=ValueError)
        self.lam = check_lambda(lam)
        self.window = check_int("window", window, type_error=ValueError)
        self.window_items = check_window_items(window_items)
        self._values: list[dict[Item, int]] = [{} for _ in range(self.k)]
        self.messages_received = 0

    @property
    def words_received(self) -> int:
        return WORDS_PER_MESSAGE * self.messages_received

    def receive(self, node: int, messages: Iterable[Message]) -> None:
        """Apply node ``node``'s (0-based) messages of one step, in order."""
        values = self._values[check_int("node", node, minimum=0, below=self.k, type_error=ValueError)]
        for x, c in messages:
            if c:
                values[x] = c
            else:
                values.pop(x, None)
            self.messages_received += 1

    def node_values(self, node: int) -> dict[Item, int]:
        """c_i(x) for node i (non-zero only)."""
        return dict(self._values[node])

    def counts(self) -> dict[Item, int]:
        """c(x) = Σ_i c_i(x), non-zero entries in the universe's order."""
        total: dict[Item, int] = {}
        for values in self._values:
            for x, c in values.items():
                total[x] = total.get(x, 0) + c
        return {x: total[x] for x in sorted(total, key=item_order_key) if total[x]}

    def heavy_hitters(self, theta: object) -> set[Item]:
        """{x : c(x) >= (θ − λ)k·W} (W: ``window_items`` if given): a 2λ-approximation of the θ-heavy
        hitters of the union of the windows whenever c is a λ-approximate count (Theorem 1)."""
        per_node = self.window if self.window_items is None else self.window_items
        bar = heavy_hitter_bar(theta, self.lam, self.k * per_node)
        return {x for x, c in self.counts().items() if c >= bar}
