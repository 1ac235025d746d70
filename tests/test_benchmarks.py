"""The benchmark suite's tables on a tiny run (NumPy and torch, a few rounds): every pair and
copy case it promises is there, with its columns, measured, and checked to share or copy.
No timing is asserted: speed claims live in benchmarks/, not in tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy")
pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import copies, overhead, report
from benchmarks.installed import discover

TINY = {"rounds": 3, "batch_ns": 20_000}


@pytest.fixture(scope="module")
def frameworks():
    found, skipped = discover(["numpy", "torch"])
    if [fw.name for fw in found] != ["numpy", "torch"]:
        pytest.skip(f"numpy and torch adapters not both usable: {skipped}")
    return found


@pytest.fixture(scope="module")
def data(frameworks):
    pairs, active = overhead.measure(frameworks, n=1000, large_n=None, log=lambda _: None, **TINY)
    copied = copies.measure(frameworks, n=100_000, rounds=2, batch_ns=1, log=lambda _: None)
    import interop

    return {
        "command": "test",
        "machine": {
            "date": "today",
            "cpu": "cpu",
            "cpus": 2,
            "affinity": 2,
            "memory_gib": 1,
            "platform": "p",
            "host": "h",
            "load_average": [0.0, 0.0, 0.0],
            "python": "3",
            "interop": getattr(interop, "__version__", None),
            "git": None,
            "versions": {},
        },
        "settings": {"n": 1000, "large_n": None, "copy_n": 100_000, "first_repeats": 1, **TINY},
        "frameworks": frameworks,
        "skipped": {},
        "fast_path": active,
        "pairs": pairs,
        "copies": copied,
        "first": [],
    }


def test_every_ordered_pair_is_measured_against_a_direct_call(data):
    from interop import api

    assert [r.pair for r in data["pairs"]] == ["numpy → torch", "torch → numpy"]
    expected = {"compiled", "pure"} if api.HUB.routes.compiled else {"pure"}
    # the pure column ran without the accelerator: here, or in a process of its own
    assert data["fast_path"].endswith("pure Python (INTEROP_PURE_PYTHON is set)")
    for r in data["pairs"]:
        assert r.error is None
        assert r.best is not None and r.best_ns is not None and r.best_ns > 0
        assert set(r.paths) == expected
        for path in r.paths.values():
            assert path.error is None  # shares memory and reads back the source's values
            assert path.ns is not None and path.diff_ns is not None and path.ratio is not None
            assert path.ok in (True, False)
            assert path.fast_path == overhead.TAKEN
            # the interval holds the median, over at least the run's rounds (more: undecided)
            low, high = path.diff_interval_ns
            assert low <= path.diff_ns <= high
            assert TINY["rounds"] <= path.rounds <= overhead.EXTEND_UP_TO * TINY["rounds"]
            assert path.decided in (True, False)
    natives = {r.pair: r.native for r in data["pairs"]}
    assert natives == {"numpy → torch": "torch.from_numpy(x)", "torch → numpy": "x.numpy()"}


def test_the_markdown_table_has_its_rows_and_columns(data):
    text = report.markdown(data)
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| pair ") and "direct µs" in ln)
    cells = [c.strip() for c in lines[head].strip("|").split("|")]
    assert cells == report.PAIR_COLUMNS
    rows = lines[head + 2 : head + 4]
    assert [r.split("|")[1].strip() for r in rows] == ["numpy → torch", "torch → numpy"]
    for row in rows:
        assert len(row.strip("|").split("|")) == len(report.PAIR_COLUMNS)
    column = report.PAIR_COLUMNS.index("pure +µs")
    for r, row in zip(data["pairs"], rows, strict=True):
        low, high = r.paths["pure"].diff_interval_ns
        interval = f"[{low / 1e3:+.2f}, {high / 1e3:+.2f}]"
        assert row.strip("|").split("|")[column].strip().endswith(interval)
    assert "## Targets" in text and "## Forced copies" in text
    assert "**The machine was busy" not in text  # load 0 in this record


def test_forced_copies_are_fresh_memory_against_copyto(data):
    cases = {(c.src, c.case): c for c in data["copies"]}
    assert set(cases) == {
        ("numpy", copies.COPY_TRUE),
        ("numpy", copies.NON_COMPACT),
        ("torch", copies.COPY_TRUE),
        ("torch", copies.NON_COMPACT),
    }
    for key in (("numpy", copies.COPY_TRUE), ("torch", copies.COPY_TRUE)):
        c = cases[key]
        assert c.error is None and c.dst != c.src
        assert c.gbps and c.reference_gbps and c.fraction and c.own_gbps
        assert "copy" in c.copy_step
    # NumPy and torch both import strided views: neither must copy one
    assert cases[("torch", copies.NON_COMPACT)].skipped
    rows = report.copy_rows(data["copies"])
    assert all(len(r) == len(report.COPY_COLUMNS) for r in rows)


def test_json_carries_the_targets(data):
    import json

    out = json.loads(report.to_json(data))
    assert {t["target"].split()[0] for t in out["targets"]} >= {"pure", "warm", "forced"}
    assert [p["src"] for p in out["pairs"]] == ["numpy", "torch"]


def test_forced_copies_go_from_each_source_into_every_other_target():
    found, skipped = discover(["numpy", "torch", "jax"])
    if len(found) < 3:
        pytest.skip(f"numpy, torch and jax adapters not all usable: {skipped}")
    for src in found:
        targets = [dst.name for case, dst in copies.cases(src, found) if case == copies.COPY_TRUE]
        others = sorted(fw.name for fw in found if fw is not src)
        assert sorted(targets) == others  # each pair once
        assert src.name == "numpy" or targets[0] == "numpy"  # NumPy, the reference, first


def test_warm_copies_are_checked_fresh_and_say_whether_a_route_took_them():
    from benchmarks import warm_copies

    title, target, make, _ = warm_copies.CASES[0]  # a read-only array into torch
    direct = {
        "torch.from_numpy(x.copy())": "torch.from_numpy(x.copy())",
        "reversed": "torch.from_numpy(x[::-1])",  # (raises: negative strides)
    }
    row = warm_copies.measure(title, target, make, direct, rounds=3, batch_ns=20_000)
    assert row["case"] == "read-only numpy → torch" and row["remembered"] is True
    assert list(row["direct_us"]) == ["torch.from_numpy(x.copy())"] and row["convert_us"] > 0
    assert row["direct_left_out"]["reversed"].startswith("ValueError")
    machine = {"date": "today", "cpu": "cpu", "cpus": 2, "python": "3", "git": "abc"}
    table = warm_copies.markdown([row], {"into mxnet": "not here"}, machine)
    assert "| read-only numpy → torch |" in table and "| yes |" in table
    assert "- read-only numpy → torch: `reversed`: ValueError" in table
    assert "- into mxnet: not here" in table
