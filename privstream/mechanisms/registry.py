"""The mechanism registry: every private release mechanism is one declared :class:`Mechanism`.

A mechanism declares everything :func:`privstream.mechanisms.release` needs, so the entry point has
no mechanism-specific branch (validate → select → charge → sample):

* ``structure`` — the builds it accepts, as a predicate over the build's
  :class:`~privstream.sketches.BuildGuarantees` (the single source of truth for what a build
  guarantees: Lemma 2 counters, Alg. 1 slots, one-signed changes of 1 on <= k keys, user level);
* ``needs_domain`` — it noises every element of a declared universe; ``needs_delta`` follows from
  its privacy map (an (ε, δ) mechanism needs δ > 0);
* ``calibrate(request)`` — from **public parameters only** (:class:`Request`: k, the one-step
  budget, β, the declared domain, the symbolic sketch term; never the sketch, its counts or n):
  a :class:`Calibration` holding the parameters, the full :class:`ErrorBound` (noise part and the
  systematic coefficient of the sketch term) and the calibrated noise the sampler reads;
* ``prepare(sketch)`` — what the sampler reads, taken from the sketch before the ledger is charged
  (default: its counters; PMG: its k slots; pure_topk: Alg. 3's reduction); it must succeed for
  every sketch of an accepted build, so that nothing after the charge touches the sketch object;
* ``sample(prepared, request, calibration, rng)`` — the release, from the exact samplers of
  :mod:`privstream.noise`; it cannot fail for a validated request;
* ``privacy`` — its :class:`PrivacyMap` (as OpenDP declares one per measurement): d_in steps of the
  stated neighbour relation ↦ (ε, δ), with the theorem it rests on.

Registration: a mechanism module builds its ``MECHANISM`` and :func:`register` adds it;
:mod:`privstream.mechanisms.builtin` registers the built-in ones in a fixed order (the order of
:func:`names`, and ``auto``'s tie-break). :func:`get` and :func:`names` read the registry.

``auto`` (:func:`auto_key`): among the valid mechanisms, the smallest key (systematic coefficient,
noise error), or with a public ``n_bound`` (an upper bound on the n of the sketch term S = n/(k+1),
declared by the caller, never read from the sketch) the smallest noise error + c·n_bound/(k+1).
Both depend only on public parameters, so the choice never depends on the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from privstream.accounting import Budget
from privstream.mechanisms.domain_topk import DeclaredDomain
from privstream.mechanisms.release_types import ErrorBound
from privstream.noise.rng import RandomSource
from privstream.privacy import NeighbourRelation
from privstream.sketches import Build, BuildGuarantees, Key
from privstream.validation import check_int

Items = tuple[tuple[Key, int], ...]


@dataclass(frozen=True)
class Request:
    """The public parameters a mechanism is calibrated from. ``budget`` is the one-step budget
    (after group privacy, Lemma 8.1); ``partitions`` the number of summed partition sketches."""

    k: int
    budget: Budget
    beta: float
    domain: DeclaredDomain | None
    sketch_term: str
    partitions: int = 1


@dataclass(frozen=True)
class Calibration:
    """A calibrated mechanism: what the release reports (``parameters``, ``error_bound``) and the
    calibrated noise its sampler reads (``noise``: thresholds, σ², scales …)."""

    error_bound: ErrorBound
    parameters: tuple[tuple[str, Any], ...]
    noise: Any = None


@dataclass(frozen=True)
class Structure:
    """The neighbour structure a mechanism needs, as a predicate over a build's guarantees, and the
    words its refusal uses ("needs {needs}; this one is {build}{hint}")."""

    holds: Callable[[BuildGuarantees], bool]
    needs: str
    hint: str = ""


@dataclass(frozen=True)
class NoGuarantee:
    """What a privacy map answers where its bound leaves nothing: group privacy (Lemma 8.1) at
    ``d_in`` steps gives δ = d·e^{dε}·δ₁ ≥ 1, and (ε, δ ≥ 1)-DP holds for every mechanism, so it
    says nothing. Never a :class:`Budget` (which refuses δ ≥ 1), so no caller can charge or state it."""

    d_in: int
    epsilon: float  #: d·ε, for the message
    delta_bound: float  #: d·e^{dε}·δ₁ (inf where it overflows)

    def render(self) -> str:
        return (
            f"no DP guarantee at {self.d_in} steps: group privacy (Lemma 8.1) gives "
            f"δ = {self.delta_bound:g} ≥ 1 at ε = {self.epsilon:g}"
        )


@dataclass(frozen=True)
class PrivacyMap:
    """The privacy map of a mechanism calibrated to one step of the stated relation.

    ``pure``: ε-DP (δ = 0 is charged and reported); otherwise (ε, δ)-DP. Applied to d_in > 1 steps
    (group privacy, Lebeda–Tětek Lemma 8.1): (ε, δ) for one step gives (d·ε, d·e^{dε}·δ), or
    :class:`NoGuarantee` where that δ reaches 1."""

    pure: bool
    theorem: str

    def __call__(self, calibrated: Budget, d_in: int = 1) -> Budget | NoGuarantee:
        """(ε, δ) for inputs ``d_in`` steps apart, for noise calibrated to ``calibrated`` per step."""
        check_int("d_in", d_in, type_error=ValueError)
        if d_in == 1:
            return self.charged(calibrated)
        eps = float(d_in) * calibrated.epsilon if d_in < 2**1000 else math.inf
        if not math.isfinite(eps):  # d·ε overflows a float: no finite ε is left to state
            return NoGuarantee(d_in, eps, math.inf)
        if self.pure or calibrated.delta == 0:
            return Budget(eps, 0.0)
        delta = (
            d_in * math.exp(eps) * calibrated.delta if eps < 700 else math.inf
        )  # e^{dε} overflows past 709
        if delta >= 1:
            return NoGuarantee(d_in, eps, delta)
        return Budget(eps, delta)

    def covers(self, calibrated: Budget, d_in: int, budget: Budget) -> bool:
        """The map at ``d_in`` is within ``budget`` (up to float rounding of the inversion)."""
        got, tol = self(calibrated, d_in), 1 + 1e-9
        if isinstance(got, NoGuarantee):
            return False
        return got.epsilon <= budget.epsilon * tol and got.delta <= budget.delta * tol

    def charged(self, budget: Budget) -> Budget:
        """What a release under ``budget`` states and the ledger is charged: δ = 0 if pure."""
        return Budget(budget.epsilon, 0.0) if self.pure else budget

    def statement(self, epsilon: float, delta: float, relation: NeighbourRelation) -> str:
        kind = f"ε-DP (pure), ε={epsilon:g}" if self.pure else f"(ε, δ)-DP, ε={epsilon:g}, δ={delta:g}"
        return f"{kind}, for neighbours: {relation.render()} [{self.theorem}]"


def one_step_budget(budget: Budget, steps: int) -> Budget:
    """The per-step calibration whose (ε, δ) map at ``steps`` is ``budget`` (Lemma 8.1 inverted:
    ε' = ε/g, δ' = δ/(g·e^ε), so g·e^{gε'}·δ' = δ); pure mechanisms ignore δ'."""
    if steps == 1:
        return budget
    return Budget(budget.epsilon / steps, budget.delta / (steps * math.exp(budget.epsilon)))


Sampler = Callable[[Any, Request, Calibration, RandomSource], Items]


def counters_of(sketch: object) -> dict[Key, int]:
    """The default ``prepare``: the sketch's counters (its stored keys and counts)."""
    return sketch.counters()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Mechanism:
    """One release mechanism, fully declared (module docstring)."""

    name: str
    title: str
    structure: Structure
    calibrate: Callable[[Request], Calibration]
    sample: Sampler
    privacy: PrivacyMap
    needs_domain: bool = False
    prepare: Callable[[object], Any] = counters_of

    @property
    def needs_delta(self) -> bool:
        return not self.privacy.pure

    def refusal(self, build: Build, budget: Budget, domain: DeclaredDomain | None) -> str | None:
        """Why this mechanism may not release a ``build`` sketch under ``budget`` (and ``domain``),
        or None. Public parameters only; nothing is calibrated, charged or drawn."""
        if budget.epsilon <= 0:
            return "budget.epsilon must be > 0 for a release"
        if self.needs_delta and budget.delta <= 0:
            return f"{self.name} is (ε, δ)-DP and needs delta > 0; use pure_topk/chan_* with a domain"
        if self.needs_domain and domain is None:
            return f"{self.name} adds noise to every element of a declared universe: pass domain="
        if not self.structure.holds(build.guarantees):
            s = self.structure
            return f"{self.name} ({self.title}) needs {s.needs}; this one is {build.name}{s.hint}"
        return None


def auto_key(bound: ErrorBound, k: int, n_bound: int | None = None) -> tuple[float, float]:
    """``auto``'s order (smaller is better), from public values only: without ``n_bound``,
    (systematic coefficient, noise error) — a mechanism that subtracts S from every value loses to
    any that does not, since S = n/(k+1) is unknown and unbounded; with a public ``n_bound`` >= the
    stream length, (noise error + systematic·n_bound/(k+1), systematic): the error beyond the
    sketch's own under-count, which every mechanism on the sketch shares (:class:`ErrorBound`)."""
    if n_bound is None:
        return (bound.systematic, bound.noise_error)
    return (bound.noise_error + bound.systematic * n_bound / (k + 1), bound.systematic)


_REGISTRY: dict[str, Mechanism] = {}


def register(mechanism: Mechanism) -> Mechanism:
    """Add ``mechanism`` to the registry (ValueError if its name is taken or is "auto")."""
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"mechanism must be a Mechanism, not {type(mechanism).__name__}")
    if mechanism.name == "auto" or not mechanism.name.isidentifier():
        raise ValueError(f"mechanism name must be an identifier other than 'auto', got {mechanism.name!r}")
    if mechanism.name in _REGISTRY:
        raise ValueError(f"mechanism {mechanism.name!r} is already registered")
    _REGISTRY[mechanism.name] = mechanism
    return mechanism


def get(name: str) -> Mechanism:
    """The registered mechanism ``name`` (ValueError naming the choices otherwise)."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"mechanism must be 'auto' or one of {names()}, got {name!r}") from None


def names() -> tuple[str, ...]:
    """Registered mechanism names, in registration order."""
    return tuple(_REGISTRY)


def mechanisms() -> tuple[Mechanism, ...]:
    return tuple(_REGISTRY.values())


# ---- structures shared by several mechanisms (predicates over BuildGuarantees) -----------------------

SEQUENTIAL_MG = Structure(
    lambda g: g.sequential_mg,
    "a sequentially built MG sketch (the Lemma 2 counter structure: all counters differ by 1 or one does)",
)
_EXACT_HINT = " (an exact histogram has no public bound on its stored keys: use exact_threshold)"
ONE_SIGNED_K = Structure(
    lambda g: g.one_signed and g.per_counter_change == 1 and not g.exact,
    "a k-counter sketch whose neighbouring counters differ by exactly 1 on at most k keys, all with one sign",
    _EXACT_HINT,
)
L1_K = Structure(
    lambda g: g.per_counter_change == 1 and not g.exact,
    "a k-counter sketch with an l1 sensitivity of at most k (each of at most k counters changes by at most 1)",
    _EXACT_HINT,
)
EXACT_COUNTS = Structure(
    lambda g: g.exact,
    "exact counts (one count changes by exactly 1 between neighbours)",
    " (Misra-Gries sketches: use pmg, gshm or laplace_threshold)",
)
