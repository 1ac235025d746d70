"""The command line, run as a user runs it."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("numpy")


def interop(*args):
    out = subprocess.run([sys.executable, "-m", "interop", *args], capture_output=True, text=True)
    return out.returncode, out.stdout, out.stderr


def test_list_names_adapters_and_dlpack_versions():
    code, out, err = interop("list")
    assert code == 0, err
    line = next(row for row in out.splitlines() if row.startswith("numpy "))
    assert "loaded" in line and "1.0" in line
    code, out, _ = interop("list", "--json")
    numpy = next(i for i in json.loads(out) if i["name"] == "numpy")
    assert numpy["framework_installed"] is True and numpy["distribution"] == "interop-numpy"


def test_list_points_to_the_notes_a_target_has_for_some_dtypes():
    pytest.importorskip("torch")
    code, out, err = interop("list")
    assert code == 0, err
    line = next(row for row in out.splitlines() if row.startswith("torch "))
    assert "notes for uint16, uint32, uint64" in line
    code, out, _ = interop("list", "--json")
    infos = {i["name"]: i for i in json.loads(out)}
    assert sorted(infos["torch"]["dtype_notes"]) == ["uint16", "uint32", "uint64"]
    assert "addition" in infos["torch"]["dtype_notes"]["uint32"]
    assert infos["numpy"]["dtype_notes"] == {}


def test_matrix_checks_every_cell_it_prints():
    pytest.importorskip("torch")
    code, out, err = interop(
        "matrix",
        "--frameworks",
        "numpy",
        "torch",
        "--dtypes",
        "float32",
        "int8",
        "bfloat16",
        "--repeats",
        "3",
        "--json",
    )
    assert code == 0, err
    cells = {(c["source"], c["target"], c["dtype"], c["placement"]): c for c in json.loads(out)}
    # every pair on an aligned sample; NumPy's allocator also places some off 64 bytes,
    # torch's never
    assert {k[3] for k in cells if k[0] == "torch"} == {"aligned"}
    assert {k[3] for k in cells if k[0] == "numpy"} == {"aligned", "unaligned"}
    assert len(cells) == 9
    for cell in cells.values():
        assert cell["outcome"] == "zero-copy", cell
        assert cell["median_us"] > 0
    code, out, _ = interop(
        "matrix", "--frameworks", "numpy", "torch", "--dtypes", "float32", "--repeats", "3"
    )
    rows = [" ".join(line.split()) for line in out.splitlines()]
    assert "numpy -> torch | Z" in " ".join(r for r in rows if r.startswith("numpy -> torch |"))
    assert any(r.startswith("numpy -> torch (off 64 B) | Z") for r in rows), out
    assert any(r.startswith("torch -> numpy | Z") for r in rows), out


def test_two_matrix_runs_give_the_same_table():
    pytest.importorskip("tensorflow")
    from interop import matrix

    def outcomes() -> dict[tuple[str, ...], str]:
        cells = matrix.run(["numpy", "tensorflow"], ["float32", "int8", "float64"], repeats=1)
        return {(c.source, c.target, c.dtype, c.placement): c.outcome for c in cells}

    first, second = outcomes(), outcomes()
    assert first == second
    # what decides numpy -> tensorflow is the sample's placement: TensorFlow's kernels take
    # only 64-byte aligned buffers, so an array off 64 bytes arrives as an aligned copy
    assert first["numpy", "tensorflow", "float32", "aligned"] == "zero-copy"
    assert first["numpy", "tensorflow", "float32", "unaligned"] == "copied"
    cells = matrix.run(["numpy", "tensorflow"], ["float32"], repeats=1)
    (off,) = [c for c in cells if c.source == "numpy" and c.placement == "unaligned"]
    assert "64" in off.why and "align" in off.why, off.why


def test_the_conformance_kit_runs_with_one_command():
    pytest.importorskip("torch")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "interop.testing",
            "numpy",
            "-q",
            "-k",
            "test_pair and torch and float32 and contiguous",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert "2 passed" in done.stdout  # numpy -> torch and torch -> numpy
    done = subprocess.run(
        [sys.executable, "-m", "interop.testing", "nosuchframework", "-q"],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "nosuchframework" in done.stdout
