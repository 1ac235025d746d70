"""What a user installs: every distribution ships a licence and a README, pins the core range
it was written for, writes each framework bound once, and the test matrix runs each bound.

Reads the repository's files (pyproject.toml, tox.ini, the GitHub workflow) as data.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

import interop
from interop.versions import bounds, release

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = sorted(p.parent for p in (ROOT / "adapters").glob("*/pyproject.toml"))
#: tox environment -> (adapter, framework distribution) whose lower bound it must pin
MIN_ENVS = {
    "numpy-min": ("numpy", "numpy"),
    "jax-min": ("jax", "jax"),
    "tensorflow-min": ("tensorflow", "tensorflow-cpu"),
    "torch-min": ("torch", "torch"),
    "mxnet-numpy1": ("mxnet", "mxnet"),
}


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def _requirements(project: dict) -> list[str]:
    extras = project.get("optional-dependencies", {}).values()
    return [*project.get("dependencies", []), *(r for group in extras for r in group)]


def _tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return parser


def test_eight_adapter_distributions():
    assert [p.name for p in ADAPTERS] == sorted(
        "cupy jax mlx mxnet numpy paddle tensorflow torch".split()
    )


@pytest.mark.parametrize("folder", ADAPTERS, ids=lambda p: p.name)
def test_each_adapter_ships_licence_readme_and_pins_the_core(folder):
    project = _project(folder)
    assert project["name"] == f"interop-{folder.name}"
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert (folder / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert project["readme"] == "README.md"
    readme = (folder / "README.md").read_text()
    assert "pip install" in readme and f"interop-{folder.name}" in readme
    (core,) = [r for r in project["dependencies"] if bounds(r)[0] == "interop-hub"]
    low, high = bounds(core)[1]
    assert low and high, f"{core}: pin both ends of the core range"
    assert release(low) <= release(interop.__version__) < release(high), core
    entry_points = project["entry-points"]["interop.adapters"]
    assert list(entry_points) == [folder.name]


def test_the_root_licence_is_apache_2_and_the_core_version_is_written_once():
    assert (
        "Apache License\n                           Version 2.0" in (ROOT / "LICENSE").read_text()
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "interop.__version__"


@pytest.mark.parametrize("folder", ADAPTERS, ids=lambda p: p.name)
def test_framework_bounds_are_written_only_in_pyproject(folder):
    source = "".join(p.read_text() for p in folder.glob("interop_*/*.py"))
    assert "supported_versions" not in source, "the range belongs in pyproject.toml only"


def _declared_lows() -> dict[str, str]:
    """an adapter's own framework distribution -> the lowest version the adapter declares"""
    lows = {}
    for folder in ADAPTERS:
        for requirement in _requirements(_project(folder)):
            name, (low, _) = bounds(requirement)
            if low and name.startswith(folder.name):  # jax, tensorflow-cpu, mlx, ...
                lows[name] = low
    return lows


def test_the_matrix_repeats_no_framework_bound_other_than_the_adapters_own():
    # tox's deps and CI's requirements may restate a framework's lower bound (pip needs one
    # there: the adapters are installed without their dependencies), but only as declared.
    # Exact pins (torch's CPU build) and NumPy (each environment picks 1.x or 2.x) are the
    # environments' own choices.
    lows = _declared_lows()
    lines = (ROOT / "ci" / "requirements-cpu.txt").read_text().splitlines()
    lines += [re.sub(r"^\s*[\w-]+:", "", line) for line in _tox()["testenv"]["deps"].splitlines()]
    checked = 0
    for line in lines:
        name, (low, _) = bounds(line.split("#")[0].strip())
        if low and name in lows and ">=" in line and name != "numpy":
            assert release(low) == release(lows[name]), f"{line.strip()!r}: declared {lows[name]}"
            checked += 1
    assert checked >= 4  # jax, tensorflow-cpu, mlx (twice): the check reads real lines


@pytest.mark.parametrize("env", sorted(MIN_ENVS))
def test_each_min_environment_pins_its_adapters_lower_bound(env):
    adapter, framework = MIN_ENVS[env]
    declared = [bounds(r)[1] for r in _requirements(_project(ROOT / "adapters" / adapter))]
    names = [bounds(r)[0] for r in _requirements(_project(ROOT / "adapters" / adapter))]
    low = declared[names.index(framework)][0]
    assert low, f"interop-{adapter} declares no lower bound for {framework}"
    deps = _tox()[f"testenv:{env}"]["deps"]
    if env == "mxnet-numpy1":  # pip resolves the adapter's own `mxnet` extra: its lowest
        assert "adapters/mxnet[mxnet]" in deps
        return
    pins = dict(re.findall(r"^\s*([A-Za-z0-9_.-]+)(?:\[\w+\])?==(\S+)", deps, re.M))
    pinned = release(pins[framework])
    assert pinned[: len(release(low))] == release(low), f"{env} pins {pins[framework]}, not {low}"


def test_the_workflow_runs_every_environment_on_oldest_and_newest_python():
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    envlist = [e.strip() for e in _tox()["tox"]["envlist"].split(",")]
    for env in [*envlist, "torch-min"]:
        listed = (
            rf"[\[ ,]{re.escape(env)}[\],]|^\s*(- )?env: {re.escape(env)}$"  # a list, an include
        )
        assert re.search(listed, workflow, re.M), f"{env} is not run by CI"
    assert '"3.10"' in workflow and '"3.13"' in workflow


#: framework distributions whose default wheel is a build the user must choose (CUDA or CPU,
#: several GB): an adapter names them only in an extra, never as a plain dependency
USERS_CHOICE = {"torch", "tensorflow", "tensorflow-cpu", "paddlepaddle", "cupy-cuda12x", "mxnet"}


@pytest.mark.parametrize("folder", ADAPTERS, ids=lambda p: p.name)
def test_no_adapter_pulls_a_framework_build_behind_the_users_back(folder):
    required = {bounds(r)[0] for r in _project(folder).get("dependencies", [])}
    assert not required & USERS_CHOICE, f"interop-{folder.name} requires {required}"


def test_torchs_range_is_still_declared_in_its_extra():
    torch = _project(ROOT / "adapters" / "torch")
    assert _declared_lows()["torch"] == "2.10"
    assert [bounds(r)[0] for r in torch["optional-dependencies"]["torch"]] == ["torch"]


def test_each_core_extra_brings_its_adapter_and_numpys():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for folder in ADAPTERS:
        names = [bounds(r)[0] for r in extras[folder.name]]
        assert f"interop-{folder.name}" in names and "interop-numpy" in names, folder.name
        for requirement in extras[folder.name]:
            low, high = bounds(requirement)[1]
            assert low and high, f"{requirement}: pin both ends as the adapters pin the core"
