"""docs/plugins.md's complete example is a working plugin: extracted, installed, kit-tested.

The files marked `<!-- file: PATH -->` on the page (the pyproject, the adapter module and the
kit's test) are written out as they are, installed by pip as a real distribution, and run
against a NumPy-backed stand-in of the example framework (tests/standin/myfw), next to NumPy and
PyTorch. If the page drifts from the contract, these tests fail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "plugins.md"
STANDIN = Path(__file__).resolve().parent / "standin"
BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```\w*\n(?P<body>.*?)\n```", re.S)
#: the frameworks the example runs against: NumPy (its stand-in's own memory) and, when
#: installed, PyTorch (no negative strides, always-writable results); others are disabled to
#: keep the run short (the kit runs every pair elsewhere)
PARTNERS = ("numpy", "torch")


def page_files() -> dict[str, str]:
    return {m["path"]: m["body"] + "\n" for m in BLOCK.finditer(PAGE.read_text())}


def test_the_page_marks_a_complete_plugin():
    files = page_files()
    assert set(files) == {"pyproject.toml", "interop_myfw/__init__.py", "tests/test_conformance.py"}
    assert 'myfw = "interop_myfw:MyFwAdapter"' in files["pyproject.toml"]
    assert "contract = (2, 0)" in files["interop_myfw/__init__.py"]


def test_every_hook_field_and_exchange_member_is_documented():
    """The page documents the whole contract: each Adapter attribute and hook, each role and
    its hooks, each Capabilities field, each ExchangeObject member, and the contract version."""
    import dataclasses

    from interop.adapter import CONTRACT_VERSION, Adapter, Capabilities, ExchangeObject
    from interop.roles import ROLES

    text = PAGE.read_text()
    hooks = {n for n in vars(Adapter) if not n.startswith("_")}
    hooks |= {role.__name__ for role in ROLES} | {h for role in ROLES for h in role.hooks}
    fields = {f.name for f in dataclasses.fields(Capabilities)}
    exchange = {"info", "versioned", "take", "take_as", "retag", "release", "__dlpack__"}
    assert exchange <= set(dir(ExchangeObject)) | {"info"}
    missing = sorted(n for n in hooks | fields | exchange if f"`{n}" not in text)
    assert not missing, f"docs/plugins.md does not document {missing}"
    assert "version {}.{}".format(*CONTRACT_VERSION) in text


def _framework_metadata(site: Path, version: str) -> None:
    """What installing a real myfw would leave: a distribution with a version."""
    info = site / f"myfw-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: myfw\nVersion: {version}\n")


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """The page's plugin, pip-installed into a scratch folder; the project folder too."""
    root = tmp_path_factory.mktemp("myfw-plugin")
    project = root / "interop-myfw"
    for path, body in page_files().items():
        target = project / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    (project / "README.md").write_text("interop-myfw\n")
    (project / "LICENSE").write_text((ROOT / "LICENSE").read_text())
    site = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    pip += ["--no-build-isolation", "--target", str(site), str(project)]
    subprocess.run(pip, check=True, capture_output=True)
    return project, site


def _env(site: Path, **extra: str) -> dict[str, str]:
    from interop.registry import REGISTRY

    others = {r.name for r in REGISTRY.loaded()} - set(PARTNERS)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(STANDIN)]),
        "INTEROP_DISABLE": ",".join(sorted(others)),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        **extra,
    }


def _statuses(site: Path) -> dict[str, dict]:
    code = "import json, interop; print(json.dumps([i.__dict__ for i in interop.adapters()]))"
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(site), capture_output=True, text=True, check=True
    )
    return {i["name"]: i for i in json.loads(out.stdout)}


def test_the_example_plugin_loads_with_its_declared_framework_range(plugin):
    _, site = plugin
    _framework_metadata(site, "2.1.0")
    try:
        info = _statuses(site)["myfw"]
        assert info["status"] == "loaded", info
        assert info["distribution"] == "interop-myfw"
        assert info["framework_version"] == "2.1.0"
    finally:
        import shutil

        shutil.rmtree(site / "myfw-2.1.0.dist-info")
    # the page's range is myfw>=2.0,<4: a myfw 1.x is reported, never used
    _framework_metadata(site, "1.9.0")
    try:
        info = _statuses(site)["myfw"]
        assert info["status"] == "unsupported version", info
        assert "myfw 1.9.0 is installed" in info["error"] and ">=2.0,<4" in info["error"]
    finally:
        import shutil

        shutil.rmtree(site / "myfw-1.9.0.dist-info")


def test_the_example_plugin_passes_the_conformance_kit(plugin):
    import numpy as np

    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        pytest.skip("the stand-in behaves as the page's myfw (versioned DLPack) on NumPy >= 2.1")
    project, site = plugin
    command = [sys.executable, "-m", "pytest", "tests/test_conformance.py", "-q", "-p"]
    command += ["no:cacheprovider", "-p", "no:randomly", "-W", "ignore::DeprecationWarning"]
    out = subprocess.run(command, cwd=project, env=_env(site), capture_output=True, text=True)
    tail = "\n".join(out.stdout.splitlines()[-30:])
    assert out.returncode == 0, f"{tail}\n{out.stderr[-3000:]}"
    summary = re.search(r"(\d+) passed", out.stdout)
    assert summary and int(summary.group(1)) >= 150, tail  # 2 pairs x 15 dtypes x 5 layouts
    assert " failed" not in tail and " error" not in tail


def test_the_example_adapters_hooks_use_myfws_own_kernels(plugin):
    """The kit's oracle hooks of the example, checked against values computed here."""
    _, site = plugin
    code = textwrap.dedent(
        """
        import interop, myfw
        from interop_myfw import MyFwAdapter

        a = MyFwAdapter()
        x = a.sample("int16", (2, 3))
        doubled, total = a.exercise(x)
        flags = a.sample("bool", (4,))
        negated, count = a.exercise(flags)
        print(x.tobytes().hex(), doubled.tobytes().hex(), total.tobytes().hex())
        print(flags.tobytes().hex(), negated.tobytes().hex(), count.tobytes().hex())
        print(doubled.dtype, total.shape, count.dtype, negated.dtype)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(site), capture_output=True, text=True, check=True
    )
    import numpy as np

    from interop.samples import sample_values

    values = np.array(sample_values("int16", (2, 3)), dtype=np.int16)
    flags = np.array(sample_values("bool", (4,)))
    lines = out.stdout.split("\n")
    x_hex, doubled_hex, total_hex = lines[0].split()
    assert bytes.fromhex(x_hex) == values.tobytes()
    assert bytes.fromhex(doubled_hex) == (values + values).tobytes()
    assert int.from_bytes(bytes.fromhex(total_hex), sys.byteorder, signed=True) == values.sum()
    flags_hex, not_hex, count_hex = lines[1].split()
    assert bytes.fromhex(flags_hex) == flags.tobytes()
    assert bytes.fromhex(not_hex) == np.logical_not(flags).tobytes()
    assert int.from_bytes(bytes.fromhex(count_hex), sys.byteorder) == int(flags.sum())
    assert lines[2].split()[0] == "int16" and lines[2].split()[-1] == "bool"
