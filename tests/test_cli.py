"""The command line, run as a user runs it."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parent.parent


def interop(*args):
    out = subprocess.run([sys.executable, "-m", "interop", *args], capture_output=True, text=True)
    return out.returncode, out.stdout, out.stderr


def test_list_names_adapters_and_dlpack_versions():
    code, out, err = interop("list")
    assert code == 0, err
    line = next(row for row in out.splitlines() if row.startswith("numpy "))
    assert "loaded" in line and "1.0" in line
    code, out, _ = interop("list", "--json")
    numpy = next(i for i in json.loads(out)["adapters"] if i["name"] == "numpy")
    assert numpy["framework_installed"] is True and numpy["distribution"] == "interop-numpy"


def test_list_points_to_the_notes_a_target_has_for_some_dtypes():
    pytest.importorskip("torch")
    code, out, err = interop("list")
    assert code == 0, err
    line = next(row for row in out.splitlines() if row.startswith("torch "))
    assert "notes for uint16, uint32, uint64" in line
    code, out, _ = interop("list", "--json")
    infos = {i["name"]: i for i in json.loads(out)["adapters"]}
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

    def reasons() -> list[str]:  # the table less its timings: the reasons name alignments
        text = matrix.render(matrix.run(["numpy", "tensorflow"], ["float32"], repeats=1))
        return [line for line in text.splitlines() if "|" not in line]

    first, second = outcomes(), outcomes()
    assert first == second
    assert reasons() == reasons() == reasons()
    # what decides numpy -> tensorflow is the sample's placement: TensorFlow's kernels take
    # only 64-byte aligned buffers, so an array off 64 bytes arrives as an aligned copy
    assert first["numpy", "tensorflow", "float32", "aligned"] == "zero-copy"
    assert first["numpy", "tensorflow", "float32", "unaligned"] == "copied"
    cells = matrix.run(["numpy", "tensorflow"], ["float32"], repeats=1)
    (off,) = [c for c in cells if c.source == "numpy" and c.placement == "unaligned"]
    assert "64" in off.why and "align" in off.why, off.why


def test_matrix_keeps_a_source_that_never_aligns_to_its_off_64_rows():
    pytest.importorskip("mlx.core")
    from interop import matrix

    # MLX's CPU allocator places arrays 8 bytes off 16: never 64-byte aligned
    # (complex128, which MLX cannot make, is said once, on the aligned row)
    cells = matrix.run(["mlx", "numpy"], ["float32", "int8", "complex128"], repeats=1)
    assert [c for c in cells if c.outcome == "failed"] == []
    made = [c for c in cells if c.source == "mlx" and c.dtype != "complex128"]
    assert {c.placement for c in made} == {"unaligned"}
    unmade = [c for c in cells if c.source == "mlx" and c.dtype == "complex128"]
    assert [(c.placement, c.outcome) for c in unmade] == [("aligned", "unsupported")]
    assert {c.placement for c in cells if c.source == "numpy"} == {"aligned", "unaligned"}
    text = matrix.render(cells)
    assert "never placed 64-byte aligned (rows off 64 B only): mlx" in text


def test_matrix_says_the_plans_reasons_not_the_warm_routes():
    pytest.importorskip("torch")
    from interop import matrix

    first = matrix.run(["numpy", "torch"], ["float32", "int8"], repeats=1)
    again = matrix.run(["numpy", "torch"], ["float32", "int8"], repeats=1)  # routes are warm now
    assert [c.why for c in first] == [c.why for c in again]
    assert not any("route" in c.why for c in again), [c.why for c in again]


def test_list_json_says_the_fast_path_as_the_table_does():
    code, out, err = interop("list")
    assert code == 0, err
    line = out.splitlines()[-1]
    assert line.startswith("fast path: ")
    code, out, err = interop("list", "--json")
    assert code == 0, err
    assert json.loads(out)["fast_path"] == line.removeprefix("fast path: ")


def test_version():
    code, out, _ = interop("--version")
    import interop as package

    assert code == 0 and out.strip() == f"interop-hub {package.__version__}"


@pytest.mark.parametrize("option", ["--frameworks", "--dtypes"])
def test_matrix_options_without_a_value_are_errors(option):
    code, out, err = interop("matrix", option, "--repeats", "1")
    assert code == 2 and out == ""
    assert f"argument {option}: expected at least one argument" in err


@pytest.mark.parametrize("again", ["numpy", "np"])
def test_matrix_refuses_one_framework_named_twice(again):
    code, out, err = interop("matrix", "--frameworks", "numpy", again, "--repeats", "1")
    assert code == 2 and out == ""
    assert "at least two different usable frameworks (named: numpy)" in err


def test_matrix_takes_back_the_spellings_it_prints():
    pytest.importorskip("torch")
    code, out, err = interop(
        "matrix", "--frameworks", "pytorch", "np", "--dtypes", "u8", "f32", "--repeats", "1"
    )
    assert code == 0, err
    header = next(row for row in out.splitlines() if row.strip().startswith("|"))
    assert header.split() == ["|", "u8", "f32"]
    code, out, err = interop(
        "matrix",
        "--frameworks",
        "pytorch",
        "numpy",
        "--dtypes",
        *header.split()[1:],
        "uint8",
        "--repeats",
        "1",
        "--json",
    )
    assert code == 0, err
    cells = {(c["source"], c["target"], c["dtype"]): c["outcome"] for c in json.loads(out)}
    assert cells == {
        (s, t, d): "zero-copy"
        for s, t in (("numpy", "torch"), ("torch", "numpy"))
        for d in ("uint8", "float32")
    }
    code, _, err = interop("matrix", "--frameworks", "numpy", "torch", "--dtypes", "f63")
    assert code == 2 and "unknown dtype 'f63'" in err and "float64/f64" in err
    code, _, err = interop("matrix", "--frameworks", "numpy", "pytorchh")
    assert code == 2 and "'pytorchh'" in err and "usable here: " in err


def test_list_into_a_closed_pipe_is_quiet():
    """`interop list | head -1`: the reader leaves; no traceback, and the status of a process
    ended by SIGPIPE, as Unix tools give."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        done = subprocess.run(
            [sys.executable, "-m", "interop", "list"], stdout=write, stderr=subprocess.PIPE
        )
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert b"Traceback" not in done.stderr and b"BrokenPipeError" not in done.stderr


HIDE_NUMPY_ADAPTER = """
    import importlib.metadata as md, json
    real = md.entry_points
    def entry_points(**kw):
        found = real(**kw)
        if kw.get("group") == "interop.adapters":
            return md.EntryPoints(ep for ep in found if ep.name != "numpy")
        return found
    md.entry_points = entry_points
    import io, contextlib, sys
    from interop.cli import main
    main(["list"])
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        main(["list", "--json"])
    print(json.dumps(json.loads(text.getvalue())["missing_adapters"]))
    print(sorted(m for m in sys.modules if m == "numpy" or m.startswith("numpy.")))
"""


def test_list_names_an_installed_framework_without_its_adapter():
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HIDE_NUMPY_ADAPTER)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    row = next(r for r in lines if r.startswith("numpy "))
    # run from this clone: the clone's folder is what installs (nothing is on PyPI yet)
    assert "no adapter" in row and "pip install ./adapters/numpy" in row
    assert {"name": "numpy", "install": "pip install ./adapters/numpy"} in json.loads(lines[-2])
    assert lines[-1] == "[]"  # found, not imported


def test_the_install_line_works_from_where_it_runs(tmp_path, monkeypatch):
    """A clone's folder (relative inside the clone, absolute outside it), else PyPI's name."""
    from interop import registry

    monkeypatch.chdir(ROOT / "adapters")
    assert registry.install_line("torch") == "pip install ./torch"
    monkeypatch.chdir(tmp_path)
    assert registry.install_line("torch") == f"pip install {ROOT / 'adapters' / 'torch'}"
    # an interop installed from a wheel: no adapters/ folder beside the package
    monkeypatch.setattr(registry, "__file__", str(tmp_path / "interop" / "registry.py"))
    assert registry.install_line("torch") == "pip install interop-torch"


def _help_entries(*command: str) -> dict[str, str]:
    """Each entry of a --help listing's sections (options, commands): name -> description."""
    code, out, err = interop(*command, "--help")
    assert code == 0, err
    entries: dict[str, str] = {}
    for section in out.split("\n\n"):
        heading, *lines = section.splitlines()
        if heading.startswith(" ") or not heading.endswith(":") or heading.startswith("usage"):
            continue  # the usage, the description, the epilog
        name = ""
        for line in lines:
            indent = len(line) - len(line.lstrip())
            if name and indent > 8:  # a description's own or continued line
                entries[name] = f"{entries[name]} {line.strip()}".strip()
                continue
            head, _, tail = line.strip().partition("  ")
            name = head.split(" ")[0].rstrip(",")
            entries[name] = tail.strip()
    return entries


@pytest.mark.parametrize(
    ("command", "names"),
    [
        ((), {"-h", "--version", "COMMAND", "list", "matrix"}),
        (("list",), {"-h", "--json"}),
        (("matrix",), {"-h", "--json", "--frameworks", "--dtypes", "--repeats"}),
    ],
)
def test_help_describes_every_option(command, names):
    entries = _help_entries(*command)
    assert set(entries) == names
    undescribed = sorted(n for n, words in entries.items() if len(words.split()) < 2)
    assert not undescribed, f"interop {' '.join(command)} --help: {undescribed} undescribed"


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
