"""The :class:`Release` record every mechanism returns, its :class:`ErrorBound`, and the error
raised when a mechanism's assumptions are not met."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from privstream.privacy import NeighbourRelation, StatesRelation
from privstream.sketches import Key


class MechanismNotApplicable(ValueError):
    """The sketch (its build, parameters or the request) does not meet the mechanism's assumptions."""


@dataclass(frozen=True)
class ErrorBound:
    """With probability >= 1 − ``beta``, simultaneously for every item x of the universe (the
    declared domain, for the domain-wide mechanisms):

        f(x) − ``below`` − S  <=  f̂(x)  <=  f(x) + ``above``,     S = ``sketch_term``

    where f̂(x) is the released value (0 if x is not released). (One exception, said in its
    ``derivation``: ``exact_threshold`` without a declared domain has no public bound on the number
    of items, so its bound holds for each item separately with probability >= 1 − ``beta``.) ``below`` and ``above`` (noise and
    threshold) depend only on public parameters. The data-dependent sketch term S (e.g. n/(k+1),
    Fact 1 / Lemma 8.11) stays symbolic because the stream length is not public.

    ``systematic`` is the coefficient c of S that the *mechanism itself* subtracts from every value:
    0 for mechanisms that noise the MG counters, 1 for Alg. 3 (pure_topk), which subtracts
    γ = Σc/(k+1) = S − α from every counter (α = the sketch's decrements, Lemma 6.1). The interval
    above already contains it (Lemma 6.1 bounds the total by S); what differs is that the sketch's
    own under-count α is the same for every mechanism on one sketch (and 0 on streams of <= k
    distinct items), while the systematic part is paid on every stream. So a mechanism's error
    beyond the sketch's own is at most ``noise_error`` + c·S: the totals ``auto`` compares
    (:func:`privstream.mechanisms.registry.auto_key`).
    """

    below: float
    above: float
    beta: float
    sketch_term: str
    derivation: str
    systematic: float = 0.0

    @property
    def noise_error(self) -> float:
        """max(below, above): the public part of the bound."""
        return max(self.below, self.above)

    def to_dict(self) -> dict[str, Any]:
        """The fields of the Avro ``io.privstream.ErrorBound`` record (``Release.error_bound``)."""
        return {
            "below": float(self.below),
            "above": float(self.above),
            "beta": float(self.beta),
            "sketch_term": self.sketch_term,
            "systematic": float(self.systematic),
            "derivation": self.derivation,
        }


@dataclass(frozen=True)
class Release(StatesRelation):
    """One private release. ``items`` are sorted by the universe's total order (data-independent).
    ``relation`` is the structured neighbour relation; ``neighbour_relation`` its text."""

    items: tuple[tuple[Key, int], ...]
    epsilon: float
    delta: float
    mechanism: str
    relation: NeighbourRelation
    error_bound: ErrorBound
    epoch: int | None = None
    parameters: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    @property
    def statement(self) -> str:
        """The privacy statement: the mechanism's privacy map applied to this release's budget and
        relation (:class:`privstream.mechanisms.registry.PrivacyMap`)."""
        from privstream.mechanisms.registry import get

        return get(self.mechanism).privacy.statement(self.epsilon, self.delta, self.relation)

    def as_dict_items(self) -> dict[Key, int]:
        return dict(self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": [[k, v] for k, v in self.items],
            "epsilon": self.epsilon,
            "delta": self.delta,
            "mechanism": self.mechanism,
            "neighbour_relation": self.neighbour_relation,
            "relation": self.relation.to_dict(),
            "privacy_unit": self.privacy_unit,
            "error_bound": self.error_bound.to_dict(),
            "epoch": self.epoch,
            "parameters": {
                k: (str(v) if not isinstance(v, int | float | str) else v) for k, v in self.parameters
            },
        }
