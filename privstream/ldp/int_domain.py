"""Shared plumbing of the randomisers over the integer domain ``0..d−1`` (OLH, HR, HG-LDP clients):
the private-value check and a base class built around one exact inner GRR."""

from __future__ import annotations

from fractions import Fraction

from privstream.ldp.grr import GeneralizedRandomizedResponse
from privstream.ldp.randomiser import LdpReport, LocalRandomiser
from privstream.noise.rng import RandomSource, resolve
from privstream.validation import check_int


def check_value(value: object, d: int) -> int:
    """``value`` if it is an int item of ``0..d−1``; ValueError without echoing it (it is private)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < d:
        raise ValueError(f"value: not in the domain 0..{d - 1} (value withheld)")
    return value


class IntDomainOracle(LocalRandomiser):
    """A frequency oracle on ``0..d−1`` whose only ε-dependent step is one exact GRR on
    ``inner_size`` values (``self._grr``); its public parameters include that GRR's exact ratio."""

    def __init__(
        self,
        epsilon: float | int | Fraction,
        domain_size: int,
        inner_size: int,
        *,
        below: int,
        rng: RandomSource | None,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.d = check_int("domain_size", domain_size, minimum=2, below=below)
        self._grr = GeneralizedRandomizedResponse(epsilon, inner_size, rng=rng)
        self._rng = resolve(rng)
        self.effective_epsilon = self._grr.effective_epsilon
        self._parameters = {
            "domain_size": str(self.d),
            "epsilon_ratio": f"{self._grr.weight_true}/{self._grr.weight_other}",
            "effective_epsilon": repr(self.effective_epsilon),
            **(extra or {}),
        }
        self._canonical = LdpReport.canonical_parameters(self._parameters)

    @property
    def parameters(self) -> dict[str, str]:
        return dict(self._parameters)

    @property
    def ratio(self) -> Fraction:
        """The exact ratio ``a/2^40 ≤ e^ε`` of the inner GRR."""
        return Fraction(self._grr.weight_true, self._grr.weight_other)
