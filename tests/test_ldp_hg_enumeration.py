"""HG-LDP clients: the exact distribution of :meth:`HgLdpClient.randomise` *itself*, draw by draw.

The other exact checks (tests/test_ldp_hg_randomisers.py) read :meth:`output_distribution`, which is
separate code from :meth:`randomise`: a bug in ``randomise`` alone (e.g. DSR's shrunk mode always
sending ⊥ for one item) passed them. Here every random draw ``randomise`` makes is enumerated
(a fake :class:`~privstream.noise.rng.RandomSource`): a uniform draw over its n values, a GRR draw
(one ``randbelow`` of the total weight a + b·(m−1), paper App. A.1) over its m intervals [0, a),
[a + j·b, a + (j+1)·b) — each run at the interval's first and last value, which must give the same
output. For every input of a small domain, every public state (hot sets at the ends and in the
middle, both flags) and all four schemes (BGR; DSR full and shrunk; BDR with M3 and with ⊥; CNR),
the enumerated distribution must equal ``output_distribution`` exactly, and its worst-case
likelihood ratio must be ≤ e^ε′ (paper Def. 2.1: r for BGR/DSR, r₁·r₂ for BDR/CNR, §4.3).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from privstream.ldp import HgLdpParams, PublicState, make_client
from privstream.ldp.grr import GeneralizedRandomizedResponse
from privstream.ldp.hg_clients import HgLdpClient

D, K, EPSILON = 10, 3, Fraction(3, 2)
HOT_SETS = ((0, 4, 9), (1, 2, 3), (7, 8, 9))


class _Branch(Exception):
    """Raised at the first draw beyond the replayed path: it has ``options`` outcomes."""

    def __init__(self, options: int) -> None:
        self.options = options


class _Explorer:
    """Replays one path of draws (the index of each draw's interval, and which end of it to use)."""

    def __init__(self) -> None:
        self.path: list[int] = []
        self.position = 0
        self.last_value = False  #: use each interval's last value instead of its first
        self.weight = Fraction(1)

    def draw(self, n: int, intervals: list[tuple[int, int]]) -> int:
        if self.position == len(self.path):
            raise _Branch(len(intervals))
        low, high = intervals[self.path[self.position]]
        self.position += 1
        self.weight *= Fraction(high - low, n)
        return high - 1 if self.last_value else low


class _Draws:
    """A RandomSource whose ``randbelow`` the explorer decides: uniform, or a GRR's intervals."""

    def __init__(self, explorer: _Explorer, grr: GeneralizedRandomizedResponse | None = None) -> None:
        self.explorer, self.grr = explorer, grr

    def randbelow(self, n: int) -> int:
        grr = self.grr
        if grr is not None and n == grr.total_weight:
            a, b = grr.weight_true, grr.weight_other
            intervals = [(0, a)] + [(a + j * b, a + (j + 1) * b) for j in range(grr.d - 1)]
            assert intervals[-1][1] == n
        else:
            assert n <= 10_000, f"randbelow({n}): not a GRR draw, too many values to enumerate"
            intervals = [(i, i + 1) for i in range(n)]
        return self.explorer.draw(n, intervals)

    def randbits(self, n: int) -> int:
        raise AssertionError("the HG-LDP clients draw only with randbelow")


def _enumerable(scheme: str) -> tuple[HgLdpParams, HgLdpClient, _Explorer]:
    params = HgLdpParams(scheme, EPSILON, D, K)
    explorer = _Explorer()
    client = make_client(params, rng=_Draws(explorer))  # type: ignore[arg-type]
    for grr in vars(client).values():
        if isinstance(grr, GeneralizedRandomizedResponse):
            grr._rng = _Draws(explorer, grr)
    return params, client, explorer


def randomise_distribution(client: HgLdpClient, explorer: _Explorer, index: int, state: PublicState) -> dict:
    """The exact distribution of ``client.randomise(index, state)`` over all its draws."""
    out: dict[int, Fraction] = {}
    stack: list[list[int]] = [[]]
    while stack:
        path = stack.pop()
        results = []
        for last_value in (False, True):
            explorer.path, explorer.position, explorer.last_value, explorer.weight = (
                path,
                0,
                last_value,
                Fraction(1),
            )
            try:
                results.append(client.randomise(index, state))
            except _Branch as branch:
                stack.extend(path + [option] for option in range(branch.options))
                break
            assert explorer.position == len(path), "randomise ignored part of the replayed draws"
        if len(results) == 2:
            assert results[0] == results[1], f"output not constant on a draw interval: path {path}"
            out[results[0]] = out.get(results[0], Fraction(0)) + explorer.weight
    return out


CASES = [
    ("bgr", False),
    ("dsr", True),  # full mode: GRR on D
    ("dsr", False),  # shrunk mode: GRR on H ∪ {⊥}
    ("bdr", True),  # an eviction is due: M3 on the cold branch
    ("bdr", False),  # ⊥ branch
    ("cnr", True),
    ("cnr", False),
]


@pytest.mark.parametrize(("scheme", "weakest_low"), CASES)
def test_randomise_enumerated_draw_by_draw_equals_the_exact_distribution(
    scheme: str, weakest_low: bool
) -> None:
    params, client, explorer = _enumerable(scheme)
    bound = params.ratio if scheme in ("bgr", "dsr") else params.ratio1 * params.ratio2
    assert bound <= Fraction(math.exp(float(EPSILON)))
    for hot in HOT_SETS:
        state = PublicState(7, hot, weakest_low)
        dists = [randomise_distribution(client, explorer, v, state) for v in range(D)]
        for v, dist in enumerate(dists):
            assert sum(dist.values()) == 1
            exact = {y: pr for y, pr in client.output_distribution(v, state).items() if pr}
            assert dist == exact, f"{scheme} {state}: randomise({v}) differs from output_distribution"
        worst = Fraction(1)
        for y in set().union(*dists):
            probabilities = [dist.get(y, Fraction(0)) for dist in dists]
            assert min(probabilities) > 0, f"{scheme} {state}: output {y} impossible for some input"
            worst = max(worst, max(probabilities) / min(probabilities))
        assert worst <= bound, f"{scheme} {state}: worst-case ratio {float(worst)} > e^ε′ = {float(bound)}"
        if scheme == "bdr" and not weakest_low:  # ⊥ branch: only ε₁ is spent on ⊥ (docs/ldp.md)
            assert D in dists[0] and worst < bound


def test_the_enumerator_gives_grrs_p_and_q() -> None:
    """Sanity of the enumerator itself: a GRR draw over d values has d intervals whose weights are
    p, q, …, q (App. A.1)."""
    params, client, explorer = _enumerable("bgr")
    dist = randomise_distribution(client, explorer, 4, PublicState(0, (0, 1, 2), False))
    p, q = params.grr_full
    assert dist == {y: (p if y == 4 else q) for y in range(D)}
