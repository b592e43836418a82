"""Independent, deliberately naive reference implementations used by the sketch tests, plus the
neighbour-structure checkers (Lebeda–Tětek Lemma 2, Lemma 7.1 / Cor. 7.2 / Lemma 8.9), and tests
that pin the references to hand-computed traces."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from hypothesis import strategies as st

from privstream.sketches import Dummy, MisraGries, item_order_key

# ---------------------------------------------------------------- reference algorithms


def textbook_mg(k: int, stream: Iterable[object], start: Mapping | None = None) -> dict:
    """Standard Misra–Gries (zero counters removed immediately), optionally from ``start``."""
    c: dict = dict(start or {})
    for x in stream:
        if x in c:
            c[x] += 1
        elif len(c) < k:
            c[x] = 1
        else:
            c = {y: v - 1 for y, v in c.items() if v > 1}
    return c


def alg1_reference(k: int, stream: Iterable[object], evict: str = "smallest") -> tuple[dict, int]:
    """Alg. 1 by linear scans. ``evict="smallest"``: the paper's rule (smallest zero key in the
    total order); ``"insertion"``: the zero key inserted longest ago (breaks Lemma 2).
    Returns (slots dict, number of Branch-2 executions)."""
    c: dict = {Dummy(i): 0 for i in range(k)}
    inserted = {Dummy(i): i - k for i in range(k)}  # dummies inserted before time 0, in order
    decrements = 0
    for t, x in enumerate(stream):
        if x in c:
            c[x] += 1
        elif all(v >= 1 for v in c.values()):
            decrements += 1
            c = {y: v - 1 for y, v in c.items()}
        else:
            zeros = [y for y, v in c.items() if v == 0]
            y = (
                min(zeros, key=item_order_key)
                if evict == "smallest"
                else min(zeros, key=inserted.__getitem__)
            )
            del c[y]
            c[x] = 1
            inserted[x] = t
    return c, decrements


def reference_merge(a: Mapping, b: Mapping, k: int) -> dict:
    """Agarwal et al. merge with dicts and a full sort."""
    total = Counter(a)
    total.update(b)
    values = sorted((v for v in total.values() if v > 0), reverse=True)
    offset = values[k] if len(values) > k else 0
    return {x: v - offset for x, v in total.items() if v > offset}


def pamg_reference(k: int, users: Iterable[Sequence[object]]) -> dict:
    """Alg. 4 as printed."""
    c: dict = {}
    for user in users:
        for x in user:
            c[x] = c.get(x, 0) + 1
        if len(c) > k:
            c = {y: v - 1 for y, v in c.items() if v > 1}
    return c


def drop_one(streams: list[list], data: st.DataObject) -> list[list] | None:
    """The neighbour of a tuple of streams: one drawn element (or user) removed from one drawn
    non-empty stream; None when every stream is empty."""
    nonempty = [i for i, s in enumerate(streams) if s]
    if not nonempty:
        return None
    j = data.draw(st.sampled_from(nonempty))
    pos = data.draw(st.integers(0, len(streams[j]) - 1))
    return [s if i != j else s[:pos] + s[pos + 1 :] for i, s in enumerate(streams)]


def positive_real(c: Mapping) -> dict:
    return {x: v for x, v in c.items() if v > 0 and type(x) is not Dummy}


# ---------------------------------------------------------------- neighbour-structure checks


def lemma2_case(c: Mapping, c_minus: Mapping, k: int) -> str:
    """Check Lemma 2 for Alg. 1 slots ``c`` = MG(k, S) and ``c_minus`` = MG(k, S minus one item).
    Returns "all_minus_one" or "one_plus_one"; raises AssertionError if the lemma fails."""
    t, t2 = set(c), set(c_minus)
    common = t & t2
    assert len(t) == len(t2) == k
    assert len(common) >= k - 2, f"|T ∩ T'| = {len(common)} < k-2"
    assert all(c[x] <= 1 for x in t - common) and all(c_minus[x] <= 1 for x in t2 - common)
    keys = t | t2
    diff = {x: c.get(x, 0) - c_minus.get(x, 0) for x in keys}
    case1 = all(diff[x] == -1 for x in t2) and all(c.get(x, 0) == 0 for x in keys - t2)
    nonzero = [x for x, d in diff.items() if d != 0]
    case2 = len(nonzero) == 1 and diff[nonzero[0]] == 1 and nonzero[0] in t
    assert case1 != case2, f"Lemma 2 fails: diff={diff}"
    return "all_minus_one" if case1 else "one_plus_one"


def assert_one_signed(c: Mapping, c_other: Mapping, k: int) -> int:
    """Lemma 7.1 / Cor. 7.2 / Lemma 8.9 structure: differences all in {0,+1} or all in {0,-1},
    support <= k, key sets nested accordingly. Returns the sign (0 if equal)."""
    keys = set(c) | set(c_other)
    diff = {x: c.get(x, 0) - c_other.get(x, 0) for x in keys}
    values = {d for d in diff.values() if d != 0}
    assert values <= {1} or values <= {-1}, f"not one-signed/unit: {diff}"
    assert sum(1 for d in diff.values() if d != 0) <= k
    if values == {1}:
        assert set(c_other) <= set(c)
        return 1
    if values == {-1}:
        assert set(c) <= set(c_other)
        return -1
    return 0


def assert_mg_error_bound(estimates: Mapping, stream_counts: Mapping, n: int, k: int) -> None:
    """f(x) - n/(k+1) <= estimate(x) <= f(x) for every x (integer arithmetic)."""
    for x in set(estimates) | set(stream_counts):
        f, e = stream_counts.get(x, 0), estimates.get(x, 0)
        assert e <= f and (k + 1) * (f - e) <= n, (x, f, e, n, k)


# ---------------------------------------------------------------- tests of the references


def test_alg1_reference_and_package_match_a_hand_trace() -> None:
    # k=3: 1,2,3 fill the dummies; 1 -> 2; 4 decrements (2,3 -> 0); 5 evicts 2 (smallest zero);
    # "a" evicts 3; 1 -> 2; 2 decrements -> {1:1, 5:0, "a":0}.
    stream = [1, 2, 3, 1, 4, 5, "a", 1, 2]
    slots, alpha = alg1_reference(3, stream)
    assert slots == {1: 1, 5: 0, "a": 0} and alpha == 2
    sketch = MisraGries(3)
    for x in stream:
        sketch.update(x)
    assert sketch.slots() == [(1, 1), (5, 0), ("a", 0)]
    assert sketch.decrements == 2


def test_insertion_order_reference_differs_from_smallest_key_rule() -> None:
    # k=3: 3, 2, 1 fill the slots, 9 decrements all to 0; 7 evicts the smallest key (1) under the
    # paper's rule but the oldest inserted key (3) under insertion order.
    stream = [3, 2, 1, 9, 7]
    assert alg1_reference(3, stream)[0] == {2: 0, 3: 0, 7: 1}
    assert alg1_reference(3, stream, evict="insertion")[0] == {1: 0, 2: 0, 7: 1}


def test_reference_merge_subtracts_k_plus_first_largest() -> None:
    assert reference_merge({1: 5, 2: 3}, {2: 1, 3: 2, 4: 1}, 2) == {1: 3, 2: 2}
    assert reference_merge({1: 1}, {2: 1}, 2) == {1: 1, 2: 1}


def test_lemma2_checker_rejects_a_bad_pair() -> None:
    try:
        lemma2_case({1: 2, 2: 0}, {1: 0, 2: 0}, 2)
    except AssertionError:
        return
    raise AssertionError("checker accepted a pair that differs by 2 in one counter")
