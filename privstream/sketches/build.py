"""How a Misra–Gries-type sketch was built, and what that guarantees about neighbouring sketches.

The neighbour structure of a sketch depends on how it was built, and the release layer must refuse
mechanisms whose assumptions the structure breaks (Lebeda–Tětek §7: "we cannot run Algorithm 2 on
the merged sketch"). Every sketch records a :class:`Build`; ``build.guarantees`` is the single
source of truth for what the build guarantees: its neighbour relation (a structured
:class:`~privstream.privacy.NeighbourRelation`) and the structural facts about neighbouring
sketches. Mechanisms declare which facts they need as predicates over :class:`BuildGuarantees`
(:mod:`privstream.mechanisms.registry`); nothing else decides applicability from the build's name.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from privstream.privacy import Condition, ConditionKind, NeighbourRelation, Scope, StatesRelation, Unit

_BATCHES = Condition(
    ConditionKind.BATCHING, "batches are processed item by item, so their boundaries do not matter"
)
_USER_BATCHES = Condition(ConditionKind.BATCHING, "batches of users are processed user by user")


@dataclass(frozen=True)
class BuildGuarantees(StatesRelation):
    """What holds between the sketches of two neighbouring inputs (counters viewed as vectors
    over the universe, absent keys = 0).

    Structural facts (what mechanisms' predicates read):

    * ``sequential_mg`` — one stream processed item by item by Misra–Gries (Alg. 1 or standard MG):
      LT **Lemma 2**'s counter structure, i.e. either all counters differ by 1 (one extra decrement)
      or exactly one counter differs by 1. PMG's noise (Lemma 3 / Cor. 4) and Alg. 3's ℓ1 < 2
      (Lemma 6.2) need it; merges (§7) and PAMG (Lemma 8.9) do not have it.
    * ``alg1_slots`` — Alg. 1's k slots (zero-count keys and dummies kept, minimum-key eviction), so
      at most 2 stored keys differ per side (Lemma 2: |T ∩ T'| >= k − 2); otherwise up to k (§5.1).
    * ``one_signed`` / ``per_counter_change`` — every counter changes by at most
      ``per_counter_change``, all in one direction, on at most k keys with nested key sets (Lemma 2,
      Cor. 7.2, Lemma 8.9, Cor. 8.10). Hence ℓ1 <= k·``per_counter_change`` and ℓ2 <= √k·that.
    * ``relation.unit`` — event or user level (user level needs a bound m on the sketch).
    """

    relation: NeighbourRelation
    structure: str
    reference: str
    sketch_term: str  #: the symbolic data-dependent sketch error (Fact 1, Agarwal et al., Lemma 8.8/8.11)
    sequential_mg: bool = False
    alg1_slots: bool = False
    one_signed: bool = True
    per_counter_change: int = 1

    @property
    def user_level(self) -> bool:
        return self.relation.unit is Unit.USER_SET

    @property
    def sensitivity_reduction(self) -> bool:
        """Alg. 3 (ℓ1 < 2, Lemma 6.2) applies: its proof is over Lemma 2's two cases."""
        return self.sequential_mg

    def max_changed_counters(self, k: int) -> int:
        return k

    def differing_keys_per_side(self, k: int) -> int:
        return 2 if self.alg1_slots else k

    def l1_sensitivity(self, k: int) -> float:
        return float(self.per_counter_change * self.max_changed_counters(k))

    def l2_sensitivity(self, k: int) -> float:
        return self.per_counter_change * math.sqrt(self.max_changed_counters(k))


class Build(enum.Enum):
    """How a sketch was built (fixes its neighbour structure).

    * ``ALG1_SEQUENTIAL`` / ``STANDARD_SEQUENTIAL`` / ``PAMG``: one stream processed item by item
      (user by user) — ``update`` and ``update_batch`` alike, so batching never changes the build;
    * ``MERGED`` / ``PAMG_MERGED``: the Agarwal et al. merge of separately built sketches, whose
      guarantee is for one element of *one of the merged streams*; no method produces it from one
      stream cut into batches."""

    ALG1_SEQUENTIAL = "alg1_sequential"
    STANDARD_SEQUENTIAL = "standard_sequential"
    MERGED = "merged"
    PAMG = "pamg"
    PAMG_MERGED = "pamg_merged"

    @property
    def guarantees(self) -> BuildGuarantees:
        return _GUARANTEES[self]

    @property
    def code(self) -> int:
        """Stable integer used by the binary format."""
        return _CODES[self]

    @classmethod
    def from_code(cls, code: int) -> Build:
        for build, c in _CODES.items():
            if c == code:
                return build
        raise ValueError(f"unknown build code {code}")


_CODES = {
    Build.ALG1_SEQUENTIAL: 1,
    Build.STANDARD_SEQUENTIAL: 2,
    Build.MERGED: 3,
    Build.PAMG: 4,
    Build.PAMG_MERGED: 5,
}

_MERGE_STRUCTURE = (
    "counters differ by exactly 1 on at most k keys, all with the same sign, key sets nested "
    "(Lemma 7.1 by induction over a fixed merge order)"
)
_STREAM_TERM = "n/(k+1) (Fact 1)"
_USER_TERM = "M/(k+1) (Lemma 8.8 / 8.11, M = total items over all users)"
_EVENT_ONE_STREAM = NeighbourRelation(Unit.EVENT, references=("Lebeda-Tetek Def. 1",), conditions=(_BATCHES,))

_GUARANTEES = {
    Build.ALG1_SEQUENTIAL: BuildGuarantees(
        relation=_EVENT_ONE_STREAM,
        structure=(
            "|T ∩ T'| >= k-2 and counters outside T ∩ T' are <= 1; either all k counters differ by 1 "
            "(one extra decrement) or one counter differs by 1 and all others are equal"
        ),
        reference="Lebeda-Tetek Alg. 1, Lemma 2",
        sketch_term=_STREAM_TERM,
        sequential_mg=True,
        alg1_slots=True,
    ),
    Build.STANDARD_SEQUENTIAL: BuildGuarantees(
        relation=_EVENT_ONE_STREAM,
        structure=(
            "same counters as Alg. 1 (Fact 1) with zero-count keys removed: either all counters "
            "differ by 1 or one counter differs by 1; up to k stored keys may differ (§5.1)"
        ),
        reference="Lebeda-Tetek §5.1 (standard Misra-Gries), Lemma 2",
        sketch_term=_STREAM_TERM,
        sequential_mg=True,
    ),
    Build.MERGED: BuildGuarantees(
        relation=NeighbourRelation(
            Unit.EVENT, scope=Scope.MERGED_STREAMS, references=("Lebeda-Tetek Cor. 7.2",)
        ),
        structure=_MERGE_STRUCTURE,
        reference="Lebeda-Tetek Lemma 7.1, Cor. 7.2 (Agarwal et al. merge of separately built sketches)",
        sketch_term="N/(k+1) (Agarwal et al. merge, N = total stream length)",
    ),
    Build.PAMG: BuildGuarantees(
        relation=NeighbourRelation(
            Unit.USER_SET, references=("Lebeda-Tetek §8, Lemma 8.9",), conditions=(_USER_BATCHES,)
        ),
        structure="T' ⊆ T and c - c' ∈ {0,1}, or the reverse; at most k counters differ",
        reference="Lebeda-Tetek Alg. 4, Lemma 8.9",
        sketch_term=_USER_TERM,
    ),
    Build.PAMG_MERGED: BuildGuarantees(
        relation=NeighbourRelation(
            Unit.USER_SET, scope=Scope.MERGED_STREAMS, references=("Lebeda-Tetek Cor. 8.10",)
        ),
        structure=_MERGE_STRUCTURE,
        reference="Lebeda-Tetek Cor. 8.10, Lemma 8.11",
        sketch_term=_USER_TERM,
    ),
}
