"""How a Misra–Gries-type sketch was built, and what that guarantees about neighbouring sketches.

The neighbour structure of a sketch depends on how it was built, and the release layer must refuse
mechanisms whose assumptions the structure breaks (Lebeda–Tětek §7: "we cannot run Algorithm 2 on
the merged sketch"). Every sketch records a :class:`Build`; ``build.guarantees`` is the data the
release layer reads (neighbour relation, privacy unit, sensitivities, which mechanisms apply).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import partial

_EVENT_RELATION = (
    "add/remove one event (stream item) at any position of one stream; stream length not public "
    "(Lebeda-Tetek Def. 1); batches are processed item by item, so their boundaries do not matter"
)
_MERGED_EVENT_RELATION = (
    "add/remove one event in one of the merged streams, every other stream unchanged (Lebeda-Tetek "
    "Cor. 7.2); this covers one event of the whole input only where the input was split into those "
    "streams by a rule that does not depend on other events (a hash of the item or user, time slices "
    "closed by punctuation), never by position"
)
_USER_RELATION = (
    "add/remove one user, i.e. one set of <= m distinct items, at any position of one stream of users "
    "(Lebeda-Tetek §8, Lemma 8.9); batches of users are processed user by user"
)
_MERGED_USER_RELATION = (
    "add/remove one user (one set of <= m distinct items) in one of the merged streams, every other "
    "stream unchanged (Lebeda-Tetek Cor. 8.10); covers one user of the whole input only where users "
    "were split into those streams by a rule that does not depend on other users (a hash of the user)"
)


@dataclass(frozen=True)
class BuildGuarantees:
    """What holds between the sketches of two neighbouring inputs (counters viewed as vectors
    over the universe, absent keys = 0).

    ``differing_keys_per_side(k)`` bounds the keys one sketch stores that the other does not;
    every counter changes by at most ``per_counter_change``; if ``one_signed`` all changes have
    the same sign. Hence ℓ1 ≤ ``max_changed_counters(k)`` and ℓ2 ≤ √``max_changed_counters(k)``.
    """

    neighbour_relation: str
    privacy_unit: str
    structure: str
    reference: str
    one_signed: bool = True
    per_counter_change: int = 1
    keys_differ_bound: str = "k"  # "2" or "k": stored-key differences per side
    pmg: str | None = None  # "alg2" (threshold 1+2ln(3/δ)/ε), "section_5_1" (1+2ln((k+1)/(2δ))/ε)
    sensitivity_reduction: bool = False  # Alg. 3 (ℓ1 < 2) applies

    def max_changed_counters(self, k: int) -> int:
        return k

    def differing_keys_per_side(self, k: int) -> int:
        return 2 if self.keys_differ_bound == "2" else k

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

_event = partial(BuildGuarantees, _EVENT_RELATION, "event")
_merged_event = partial(BuildGuarantees, _MERGED_EVENT_RELATION, "event")
_user = partial(BuildGuarantees, _USER_RELATION, "user (set of <= m distinct items)")
_merged_user = partial(BuildGuarantees, _MERGED_USER_RELATION, "user (set of <= m distinct items)")

_GUARANTEES = {
    Build.ALG1_SEQUENTIAL: _event(
        structure=(
            "|T ∩ T'| >= k-2 and counters outside T ∩ T' are <= 1; either all k counters differ by 1 "
            "(one extra decrement) or one counter differs by 1 and all others are equal"
        ),
        reference="Lebeda-Tetek Alg. 1, Lemma 2",
        keys_differ_bound="2",
        pmg="alg2",
        sensitivity_reduction=True,
    ),
    Build.STANDARD_SEQUENTIAL: _event(
        structure=(
            "same counters as Alg. 1 (Fact 1) with zero-count keys removed: either all counters "
            "differ by 1 or one counter differs by 1; up to k stored keys may differ (§5.1)"
        ),
        reference="Lebeda-Tetek §5.1 (standard Misra-Gries), Lemma 2",
        pmg="section_5_1",
        sensitivity_reduction=True,
    ),
    Build.MERGED: _merged_event(
        structure=_MERGE_STRUCTURE,
        reference="Lebeda-Tetek Lemma 7.1, Cor. 7.2 (Agarwal et al. merge of separately built sketches)",
    ),
    Build.PAMG: _user(
        structure="T' ⊆ T and c - c' ∈ {0,1}, or the reverse; at most k counters differ",
        reference="Lebeda-Tetek Alg. 4, Lemma 8.9",
    ),
    Build.PAMG_MERGED: _merged_user(
        structure=_MERGE_STRUCTURE, reference="Lebeda-Tetek Cor. 8.10, Lemma 8.11"
    ),
}
