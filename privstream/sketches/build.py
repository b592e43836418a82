"""How a Misra–Gries-type sketch was built, and what that guarantees about neighbouring sketches.

The neighbour structure of a sketch depends on how it was built, and the release layer must refuse
mechanisms whose assumptions the structure breaks (Lebeda–Tětek §7: "we cannot run Algorithm 2 on
the merged sketch"). Every sketch records a :class:`Build`; ``build.guarantees`` is the single
source of truth for what the build guarantees: its neighbour relation (a structured
:class:`~privstream.privacy.NeighbourRelation`) and the structural facts about neighbouring
sketches. Mechanisms declare which facts they need as predicates over :class:`BuildGuarantees`
(:mod:`privstream.mechanisms.registry`); nothing else decides applicability from the build's name.

Builds are registered values, not a closed list: a sketch module declares its own with
``MY_BUILD = register_build("MY_BUILD", code, BuildGuarantees(...))`` next to the sketch class, and
the release layer reads ``build.guarantees`` from the value. The Misra–Gries builds below are
registered here because the MG, PAMG and merge modules share them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar, final

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
    * ``exact`` — exact counts (no sketch error): one counter changes by exactly 1 between
      neighbours, but the number of stored keys has no public bound, so mechanisms whose error
      bounds read ``k`` as "at most k stored keys" do not apply (:mod:`privstream.sketches.exact`).
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
    exact: bool = False

    @property
    def user_level(self) -> bool:
        return self.relation.unit is Unit.USER_SET

    @property
    def sensitivity_reduction(self) -> bool:
        """Alg. 3 (ℓ1 < 2, Lemma 6.2) applies: its proof is over Lemma 2's two cases."""
        return self.sequential_mg


class _BuildRegistry(type):
    """Metaclass of :class:`Build`: iterating ``Build`` yields every registered build, in
    registration order (as iterating the former enum did)."""

    def __iter__(cls) -> Iterator[Build]:
        return iter(tuple(_BY_CODE.values()))

    def __len__(cls) -> int:
        return len(_BY_CODE)


_REGISTER = object()  #: only :func:`register_build` constructs a Build


@final
class Build(metaclass=_BuildRegistry):
    """How a sketch was built (fixes its neighbour structure): an immutable registered value with a
    ``name``, a stable binary ``code`` and its :class:`BuildGuarantees`. Builds exist only through
    :func:`register_build` (names and codes unique), so ``is`` compares them and
    ``Build.from_code(b.code) is b``. A sketch family registers its builds in its own module.

    The library's MG builds (registered below and kept as class attributes):

    * ``ALG1_SEQUENTIAL`` / ``STANDARD_SEQUENTIAL`` / ``PAMG``: one stream processed item by item
      (user by user) — ``update`` and ``update_batch`` alike, so batching never changes the build;
    * ``MERGED`` / ``PAMG_MERGED``: the Agarwal et al. merge of separately built sketches, whose
      guarantee is for one element of *one of the merged streams*; no method produces it from one
      stream cut into batches."""

    __slots__ = ("_code", "_guarantees", "_name")

    ALG1_SEQUENTIAL: ClassVar[Build]
    STANDARD_SEQUENTIAL: ClassVar[Build]
    MERGED: ClassVar[Build]
    PAMG: ClassVar[Build]
    PAMG_MERGED: ClassVar[Build]

    _name: str
    _code: int
    _guarantees: BuildGuarantees

    def __init__(self, name: str, code: int, guarantees: BuildGuarantees, *, _token: object = None) -> None:
        if _token is not _REGISTER:
            raise TypeError("a Build is created by register_build(name, code, guarantees)")
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_code", code)
        object.__setattr__(self, "_guarantees", guarantees)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Build is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Build is immutable")

    @property
    def name(self) -> str:
        return self._name

    @property
    def code(self) -> int:
        """Stable integer used by the binary format."""
        return self._code

    @property
    def guarantees(self) -> BuildGuarantees:
        return self._guarantees

    def __repr__(self) -> str:
        return f"Build.{self._name}"

    def __reduce__(self) -> tuple[Callable[[int], Build], tuple[int]]:
        return (_build_from_code, (self._code,))  # pickling keeps identity (the registered value)

    def __copy__(self) -> Build:
        return self

    def __deepcopy__(self, memo: object) -> Build:
        return self

    @classmethod
    def from_code(cls, code: int) -> Build:
        """The registered build with this binary code (ValueError if none)."""
        return _build_from_code(code)


_BY_CODE: dict[int, Build] = {}
_BY_NAME: dict[str, Build] = {}


def _build_from_code(code: int) -> Build:
    try:
        return _BY_CODE[code]
    except (KeyError, TypeError):
        raise ValueError(f"unknown build code {code!r}") from None


def register_build(name: str, code: int, guarantees: BuildGuarantees) -> Build:
    """Register a build and return it: call it once, at import, in the module of the sketch that
    produces it. ``code`` is the stable integer the binary format writes (>= 1, never reused);
    ``guarantees`` states the neighbour lemma that mechanisms' structure predicates check. A name or
    code already registered is refused (ValueError)."""
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_") or hasattr(Build, name):
        raise ValueError(f"build name must be a new public identifier, got {name!r}")
    if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code < 2**64:
        raise ValueError(f"build code must be an int in [1, 2**64), got {code!r}")
    if not isinstance(guarantees, BuildGuarantees):
        raise TypeError(f"guarantees must be a BuildGuarantees, not {type(guarantees).__name__}")
    if name in _BY_NAME:
        raise ValueError(f"build name {name!r} is already registered")
    if code in _BY_CODE:
        raise ValueError(f"build code {code} is already registered (by {_BY_CODE[code].name})")
    build = Build(name, code, guarantees, _token=_REGISTER)
    _BY_CODE[code] = build
    _BY_NAME[name] = build
    return build


_MERGE_STRUCTURE = (
    "counters differ by exactly 1 on at most k keys, all with the same sign, key sets nested "
    "(Lemma 7.1 by induction over a fixed merge order)"
)
_STREAM_TERM = "n/(k+1) (Fact 1)"
_USER_TERM = "M/(k+1) (Lemma 8.8 / 8.11, M = total items over all users)"
_EVENT_ONE_STREAM = NeighbourRelation(Unit.EVENT, references=("Lebeda-Tetek Def. 1",), conditions=(_BATCHES,))

Build.ALG1_SEQUENTIAL = register_build(
    "ALG1_SEQUENTIAL",
    1,
    BuildGuarantees(
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
)
Build.STANDARD_SEQUENTIAL = register_build(
    "STANDARD_SEQUENTIAL",
    2,
    BuildGuarantees(
        relation=_EVENT_ONE_STREAM,
        structure=(
            "same counters as Alg. 1 (Fact 1) with zero-count keys removed: either all counters "
            "differ by 1 or one counter differs by 1; up to k stored keys may differ (§5.1)"
        ),
        reference="Lebeda-Tetek §5.1 (standard Misra-Gries), Lemma 2",
        sketch_term=_STREAM_TERM,
        sequential_mg=True,
    ),
)
Build.MERGED = register_build(
    "MERGED",
    3,
    BuildGuarantees(
        relation=NeighbourRelation(
            Unit.EVENT, scope=Scope.MERGED_STREAMS, references=("Lebeda-Tetek Cor. 7.2",)
        ),
        structure=_MERGE_STRUCTURE,
        reference="Lebeda-Tetek Lemma 7.1, Cor. 7.2 (Agarwal et al. merge of separately built sketches)",
        sketch_term="N/(k+1) (Agarwal et al. merge, N = total stream length)",
    ),
)
Build.PAMG = register_build(
    "PAMG",
    4,
    BuildGuarantees(
        relation=NeighbourRelation(
            Unit.USER_SET, references=("Lebeda-Tetek §8, Lemma 8.9",), conditions=(_USER_BATCHES,)
        ),
        structure="T' ⊆ T and c - c' ∈ {0,1}, or the reverse; at most k counters differ",
        reference="Lebeda-Tetek Alg. 4, Lemma 8.9",
        sketch_term=_USER_TERM,
    ),
)
Build.PAMG_MERGED = register_build(
    "PAMG_MERGED",
    5,
    BuildGuarantees(
        relation=NeighbourRelation(
            Unit.USER_SET, scope=Scope.MERGED_STREAMS, references=("Lebeda-Tetek Cor. 8.10",)
        ),
        structure=_MERGE_STRUCTURE,
        reference="Lebeda-Tetek Cor. 8.10, Lemma 8.11",
        sketch_term=_USER_TERM,
    ),
)
