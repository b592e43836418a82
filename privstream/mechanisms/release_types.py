"""The :class:`Release` record every mechanism returns, its :class:`ErrorBound`, and the error
raised when a mechanism's assumptions are not met."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from privstream.sketches import Key


class MechanismNotApplicable(ValueError):
    """The sketch (its build, parameters or the request) does not meet the mechanism's assumptions."""


@dataclass(frozen=True)
class ErrorBound:
    """With probability >= 1 − ``beta``, simultaneously for every item x of the universe:

        f(x) − ``below`` − (``sketch_term``)  <=  f̂(x)  <=  f(x) + ``above``

    where f̂(x) is the released value (0 if x is not released). The data-dependent sketch error
    (e.g. n/(k+1), Fact 1 / Lemma 8.11) is kept symbolic in ``sketch_term`` because the stream
    length is not public; ``below`` and ``above`` depend only on public parameters.
    """

    below: float
    above: float
    beta: float
    sketch_term: str
    derivation: str

    @property
    def max_noise_error(self) -> float:
        return max(self.below, self.above)

    def to_dict(self) -> dict[str, Any]:
        return {
            "below": self.below,
            "above": self.above,
            "beta": self.beta,
            "sketch_term": self.sketch_term,
            "derivation": self.derivation,
        }


@dataclass(frozen=True)
class Release:
    """One private release. ``items`` are sorted by the universe's total order (data-independent)."""

    items: tuple[tuple[Key, int], ...]
    epsilon: float
    delta: float
    mechanism: str
    neighbour_relation: str
    privacy_unit: str
    error_bound: ErrorBound
    epoch: int | None = None
    parameters: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    def as_dict_items(self) -> dict[Key, int]:
        return dict(self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": [[k, v] for k, v in self.items],
            "epsilon": self.epsilon,
            "delta": self.delta,
            "mechanism": self.mechanism,
            "neighbour_relation": self.neighbour_relation,
            "privacy_unit": self.privacy_unit,
            "error_bound": self.error_bound.to_dict(),
            "epoch": self.epoch,
            "parameters": {
                k: (str(v) if not isinstance(v, int | float | str) else v) for k, v in self.parameters
            },
        }
