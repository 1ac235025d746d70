"""docs/plugins.md's quick start is a working plugin: extracted from the page, its adapter
passes the conformance kit registered at run time (`interop.register`) and installed through
an entry point, and a bug planted in one of its hooks fails the kit naming the hook.

Each run is a child process (registering an adapter would outlast the test here), on a short
subset of the kit against NumPy and torch: tests/test_conformance.py runs the whole kit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("array_api_strict")
pytest.importorskip("torch")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "plugins.md"
BLOCK = re.compile(r"<!-- quick start: (?P<path>\S+) -->\n```python\n(?P<body>.*?)\n```", re.S)
PARTNERS = ("numpy", "torch")
DTYPES = ("bool", "int8", "uint64", "float32", "complex128")
SHAPES = ((), (3, 4), (0, 4), (2, 3, 4))
#: 4 ordered pairs x 5 dtypes x 5 layouts, and the seven target cases it has hooks for
PASSING = 4 * len(DTYPES) * 5 + 7

PLANTED = """
import os

from quickstart_strict import StrictAdapter


class RaisingToBytes(StrictAdapter):
    def to_bytes(self, x):
        raise TypeError("planted in to_bytes")


class WrongBytes(StrictAdapter):
    def to_bytes(self, x):
        return bytes(b ^ 1 for b in super().to_bytes(x))


class RaisingImport(StrictAdapter):
    def from_dlpack(self, source):
        raise TypeError("planted in from_dlpack")


class KeepsLayout(StrictAdapter):
    def copy(self, x):  # a transposed view's copy stays transposed: not row-major
        return self.import_framework().reshape(x, x.shape, copy=True)


class AbortingOnInt8(StrictAdapter):
    def exercise(self, x):
        if x.dtype == self.import_framework().int8:
            os.abort()  # as a framework's kernel may
        return super().exercise(x)
"""

CHECK = """
import json, sys
import interop, interop.testing
from interop.testing import suite
sys.path.insert(0, {folder!r})
from {module} import {cls}
adapter = {cls}()
interop.register(adapter)
report = interop.testing.check(adapter, raise_on_failure=False, **{options!r})
print(json.dumps({{
    "passed": len(report.passed),
    "failures": [f"{{r.case}}: {{r.message}}" for r in report.failures],
    "skipped": sorted({{r.message for r in report.skipped}}),
    "worker": suite._RUNNER.worker is not None,
}}))
"""


def page_files() -> dict[str, str]:
    """The quick start's files: the adapter module and its pytest form."""
    return {m["path"]: m["body"] + "\n" for m in BLOCK.finditer(PAGE.read_text())}


def quickstart() -> tuple[str, str]:
    (path, body), _ = page_files().items()
    return path, body


def _python_path(*first: Path) -> str:
    return os.pathsep.join([*map(str, first), *(p for p in sys.path if p)])


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page's module, and the planted bugs beside it."""
    where = tmp_path_factory.mktemp("quickstart")
    path, body = quickstart()
    (where / path).write_text(body)
    (where / "planted.py").write_text(PLANTED)
    return where


def _check(folder: Path, module: str, cls: str, **options: object) -> dict:
    code = CHECK.format(folder=str(folder), module=module, cls=cls, options=options)
    env = {**os.environ, "PYTHONPATH": _python_path(), "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_the_quick_start_opens_the_page_in_60_lines_at_most():
    text = PAGE.read_text()
    assert list(page_files()) == ["quickstart_strict.py", "test_strict.py"]
    body = quickstart()[1]
    assert len(body.splitlines()) <= 60
    assert re.findall(r"^## .*", text, re.M)[0] == "## Quick start"
    hooks = set(re.findall(r"^    def (\w+)", body, re.M))
    allowed = {"tensor_types", "capabilities", "from_dlpack", "copy", "sample", "to_bytes"}
    allowed |= {"data_address", "exercise", "mutate", "views"}
    assert hooks <= allowed, hooks - allowed


def test_the_quick_start_passes_the_kit_registered_at_run_time(folder):
    """In the kit's worker (it imports the class by name), not skipped as unusable."""
    got = _check(
        folder,
        "quickstart_strict",
        "StrictAdapter",
        against=PARTNERS,
        dtypes=DTYPES,
        shapes=SHAPES,
    )
    assert got["failures"] == []
    assert got["passed"] == PASSING, got
    assert got["worker"], "the cases did not run in the kit's worker"
    assert all("declares no" in why for why in got["skipped"]), got["skipped"]


def test_the_quick_start_passes_the_kit_installed_through_an_entry_point(folder, tmp_path):
    """Found by the registry as a pip-installed plugin is, and run by the pytest form."""
    site = tmp_path / "site"
    info = site / "interop_strict-0.1.0.dist-info"
    info.mkdir(parents=True)
    path, body = quickstart()
    (site / path).write_text(body)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: interop-strict\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[interop.adapters]\nstrict = quickstart_strict:StrictAdapter\n"
    )
    test = tmp_path / "test_strict.py"
    test.write_text(
        textwrap.dedent(f"""
        import interop
        from interop.testing import ConformanceSuite


        def test_found_as_installed():
            (info,) = [i for i in interop.adapters() if i.name == "strict"]
            assert (info.status, info.distribution) == ("loaded", "interop-strict"), info


        class TestStrict(ConformanceSuite):
            framework = "strict"
            against = {PARTNERS!r}
            dtypes = {DTYPES!r}
            shapes = {SHAPES!r}
        """)
    )
    env = {**os.environ, "PYTHONPATH": _python_path(site), "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider"]
    command += ["-p", "no:randomly", "--rootdir", str(tmp_path)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    tail = "\n".join(out.stdout.splitlines()[-15:])
    assert out.returncode == 0, f"{tail}\n{out.stderr[-3000:]}"
    assert f"{PASSING + 1} passed, 4 skipped" in tail, tail


@pytest.mark.parametrize(
    ("cls", "named"),
    [
        ("RaisingToBytes", "strict.to_bytes raised TypeError: planted in to_bytes"),
        ("RaisingImport", "strict.from_dlpack raised TypeError: planted in from_dlpack"),
        ("WrongBytes", "!= strict.to_bytes of the source"),
        ("KeepsLayout", "strict.copy of transposed has strides (1, 4), not row-major (3, 1)"),
    ],
)
def test_a_bug_planted_in_a_hook_fails_the_kit_naming_the_hook(folder, cls, named):
    got = _check(
        folder,
        "planted",
        cls,
        against=("numpy",),
        dtypes=("float32",),
        shapes=((3, 4),),
        layouts=("contiguous",),
    )
    assert got["failures"], got
    assert any(named in failure for failure in got["failures"]), got["failures"]


def test_an_abort_in_a_run_time_adapters_hook_fails_its_case_not_the_run(folder):
    """The worker runs a run-time adapter's cases too: an abort fails its case (and, past the
    budget of one abort a pair, that pair's later cases), and a fresh worker runs the rest."""
    got = _check(
        folder,
        "planted",
        "AbortingOnInt8",
        against=("numpy",),
        dtypes=("int8", "float32"),
        shapes=((3, 4),),
        layouts=("contiguous",),
    )
    died, later = got["failures"]
    assert died.startswith("test_pair[numpy-strict-int8-contiguous]: "), died
    assert died.endswith("the process died of SIGABRT while running this case"), died
    assert later.startswith("test_pair[numpy-strict-float32-contiguous]: "), later
    assert "not run: numpy -> strict already aborted the process 1 times" in later, later
    assert got["passed"] == 2 + 7 and got["worker"], got  # strict -> numpy, the target cases


def test_the_pages_pytest_form_runs_the_cases_its_check_call_reports(tmp_path):
    """The page's test file, as written (the adapter given as `adapter =`, registered when
    pytest collects it), passes; as many cases as the page says `check` reports."""
    for path, body in page_files().items():
        (tmp_path / path).write_text(body)
    said = re.search(r"on strict: (\d+) passed, 0 failed, (\d+) skipped", PAGE.read_text())
    assert said, "the page no longer shows check's report"
    env = {**os.environ, "PYTHONPATH": _python_path(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-m", "pytest", "test_strict.py", "-q", "-p", "no:cacheprovider"]
    command += ["-p", "no:randomly", "--rootdir", str(tmp_path)]
    out = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600
    )
    tail = "\n".join(out.stdout.splitlines()[-15:])
    assert out.returncode == 0, f"{tail}\n{out.stderr[-3000:]}"
    assert f"{said[1]} passed, {said[2]} skipped" in tail, tail
