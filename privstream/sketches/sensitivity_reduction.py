"""Misra–Gries sketch sensitivity reduction (Lebeda–Tětek Alg. 3, §6).

γ = Σ_x c_x / (k+1); keep the keys with c_x > γ, with value c_x − γ. Values are exact rationals:
this module stores integer numerators ``c_x·(k+1) − Σc`` over the denominator ``k+1``.

Lemma 6.1: every value lies in [f(x) − n/(k+1), f(x)] (absent keys: 0). Lemma 6.2: the ℓ1 distance
between the reduced vectors of neighbouring streams is < 2, so Laplace(2/ε) on every element of the
universe + top-k is ε-DP (§6). This needs the Lemma 2 structure, so only sequentially built MG
sketches (Alg. 1 or standard MG, which have the same counters) are accepted. Per-partition reduced
sketches may be summed key-wise (§7, trusted aggregator); ℓ1 stays < 2 since one partition changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from privstream.sketches.binary_format import (
    decode,
    decode_build,
    decode_counters,
    encode,
    encode_counters,
    register_sketch,
    require,
)
from privstream.sketches.build import Build
from privstream.sketches.counter_sketch import CounterSketch
from privstream.sketches.order import Dummy, Item, item_order_key, normalize_item
from privstream.sketches.validation import common_param


@register_sketch(4)
@dataclass(frozen=True)
class ReducedSketch:
    """Output of Alg. 3: value of key x is ``numerators[x] / denominator`` with denominator k+1.

    Not a stream sketch (no ``update``; partitions combine with :func:`sum_reduced`, §7, not with
    ``merge``), so it does not implement :class:`~privstream.sketches.protocol.Sketch`; it is
    registered for the binary format only."""

    k: int
    n: int
    numerators: Mapping[Item, int]
    source_build: Build
    partitions: int = 1

    @property
    def denominator(self) -> int:
        return self.k + 1

    @property
    def l1_sensitivity(self) -> Fraction:
        """Strict upper bound on the ℓ1 distance between neighbours (Lemma 6.2)."""
        return Fraction(2)

    @property
    def error_bound(self) -> Fraction:
        """Every value lies in [f(x) - error_bound, f(x)] (Lemma 6.1; summed partitions: N/(k+1))."""
        return Fraction(self.n, self.k + 1)

    def estimate(self, item: object) -> Fraction:
        return Fraction(self.numerators.get(normalize_item(item), 0), self.k + 1)

    def values(self) -> dict[Item, Fraction]:
        """Kept keys and exact values, in the universe's total order."""
        return {x: Fraction(v, self.k + 1) for x, v in self.numerators.items()}

    def to_bytes(self) -> bytes:
        params = [self.k, self.n, self.source_build.code, self.partitions]
        return encode(ReducedSketch, params, encode_counters(self.numerators))

    @classmethod
    def from_bytes(cls, data: bytes) -> ReducedSketch:
        (k, n, build_code, partitions), payload = decode(data, cls, 4)
        build = decode_build(build_code)
        numerators = decode_counters(payload)
        require(k >= 1 and partitions >= 1, "k and partitions must be >= 1")
        require(build.guarantees.sensitivity_reduction, f"build {build.name} cannot be reduced")
        require(len(numerators) <= k * partitions, "more than k keys per partition")
        values = {x: v for x, v in numerators.items() if not isinstance(x, Dummy) and v > 0}
        require(len(values) == len(numerators), "bad reduced values")
        return cls(k, n, _sorted(values), build, partitions)


def _sorted(mapping: Mapping[Item, int]) -> dict[Item, int]:
    return dict(sorted(mapping.items(), key=lambda p: item_order_key(p[0])))


def reduce_sensitivity(sketch: CounterSketch) -> ReducedSketch:
    """Alg. 3 on a sequentially built MG sketch (ALG1_SEQUENTIAL or STANDARD_SEQUENTIAL)."""
    if not isinstance(sketch, CounterSketch) or not sketch.build.guarantees.sensitivity_reduction:
        build = getattr(sketch, "build", None)
        raise ValueError(
            f"sketch: Alg. 3 needs the Lemma 2 structure of a sequentially built MG sketch, got "
            f"{type(sketch).__name__} with build {getattr(build, 'name', build)}; for merged sketches reduce "
            "each partition sketch and use sum_reduced"
        )
    counters = sketch.counters()
    total = sum(counters.values())
    scale = sketch.k + 1
    kept = {x: c * scale - total for x, c in counters.items() if c * scale > total}
    return ReducedSketch(sketch.k, sketch.n, kept, sketch.build)


def sum_reduced(parts: Sequence[ReducedSketch]) -> ReducedSketch:
    """Key-wise sum of per-partition reduced sketches with the same k (§7, trusted aggregator)."""
    parts = list(parts)
    k = common_param(parts, "k")
    builds = {p.source_build for p in parts}
    total: dict[Item, int] = {}
    for p in parts:
        for x, v in p.numerators.items():
            total[x] = total.get(x, 0) + v
    build = builds.pop() if len(builds) == 1 else Build.STANDARD_SEQUENTIAL
    return ReducedSketch(k, sum(p.n for p in parts), _sorted(total), build, sum(p.partitions for p in parts))
