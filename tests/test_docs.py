"""The documentation site builds with warnings as errors, and its API reference documents the
public API from the docstrings (mkdocs.yml; ci/test.sh and `tox -e docs` build it too)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: page of the reference -> the objects it must document (by their anchors)
DOCUMENTED = {
    "interop": [
        "interop.convert",
        "interop.explain",
        "interop.inspect",
        "interop.convert_tree",
        "interop.explain_tree",
        "interop.wrap",
        "interop.adapters",
        "interop.register",
        "interop.immutable_policy",
        "interop.set_immutable_policy",
        "interop.Plan",
        "interop.TensorInfo",
        "interop.TensorInfo.strides",
        "interop.Device",
    ],
    "errors": [f"interop.errors.{name}" for name in ("InteropError", "CopyForbiddenError")],
    "adapter": ["interop.adapter.Adapter", "interop.adapter.Capabilities"],
    "testing": ["interop.testing.ConformanceSuite", "interop.testing.counting_capsule"],
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [m for m in ("mkdocs", "mkdocstrings_handlers.python") if not _importable(m)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install -r ci/requirements-docs.txt)")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def test_every_public_name_and_error_is_in_the_reference(site: Path) -> None:
    import interop.errors

    pages = {p: (site / "reference" / p / "index.html").read_text() for p in DOCUMENTED}
    absent = [
        f"{p}: {a}"
        for p, anchors in DOCUMENTED.items()
        for a in anchors
        if f'id="{a}"' not in pages[p]
    ]
    assert not absent, absent
    errors = [
        n
        for n, v in vars(interop.errors).items()
        if isinstance(v, type) and issubclass(v, interop.errors.InteropError)
    ]
    undocumented = [n for n in errors if f'id="interop.errors.{n}"' not in pages["errors"]]
    assert len(errors) > 10 and not undocumented, undocumented


def test_convert_is_documented_as_the_function_callers_see(site: Path) -> None:
    """`interop.convert` is built at import time; the reference still gives its signature and
    words (ci/docs_griffe.py), and `#:` comments document fields."""
    page = (site / "reference" / "interop" / "index.html").read_text()
    at = page.index('id="interop.convert"')
    entry = page[at : page.index('id="interop.explain"')]
    assert "module-attribute" not in entry and "make_convert" not in entry
    assert "dtypes" in entry and "never copies" in entry
    strides = page[page.index('id="interop.TensorInfo.strides"') :][:2000]
    assert "in elements" in strides
