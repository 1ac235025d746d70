"""The registry with real throwaway distributions, installed by pip into a scratch folder.

Each case runs in a fresh interpreter that sees the scratch folder, so entry points are read
exactly as a user's environment would present them.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numpy")

CAPS = """
    def capabilities(self):
        from interop import Capabilities
        return Capabilities(export_dtypes=frozenset({"float32"}), import_dtypes=frozenset())
"""


def plugin(name, modules, extra=""):
    return (
        name,
        f"from interop import Adapter\nclass Plugin(Adapter):\n    name = {name!r}\n"
        f"    modules = {modules!r}\n{extra}{CAPS}",
    )


PLUGINS = {
    # distribution: (entry point name, module source)
    "interop-broken-import": ("brokenimport", "raise ImportError('libtoy.so: cannot open')"),
    "interop-broken-load": (
        "brokenload",
        """
        from interop import Adapter
        class Plugin(Adapter):
            name = "brokenload"
            modules = ("brokenload_fw",)
            def __init__(self):
                raise RuntimeError("cannot initialise the toy runtime")
        """,
    ),
    "interop-old-numpy": plugin(
        "oldnumpy",
        ("numpy",),
        '    distributions = ("numpy",)\n    supported_versions = ("0.1", "1.0")\n',
    ),
    "interop-half": (  # half-installed: no capabilities declared
        "half",
        "from interop import Adapter\nclass Plugin(Adapter):\n    name = 'half'\n",
    ),
    "aaa-dup": plugin("dup", ("dup_a",)),
    "zzz-dup": plugin("dup", ("dup_z",)),
    "interop-lazy": plugin("lazy", ("lazy_fw",)),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A folder with the throwaway plugins pip-installed into it."""
    root = tmp_path_factory.mktemp("plugins")
    projects = []
    for dist, (entry, source) in PLUGINS.items():
        module = dist.replace("-", "_")
        project = root / "src" / dist
        (project / module).mkdir(parents=True)
        (project / module / "__init__.py").write_text(textwrap.dedent(source))
        (project / "pyproject.toml").write_text(
            textwrap.dedent(f"""
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "{dist}"
            version = "0.0.1"
            [project.entry-points."interop.adapters"]
            {entry} = "{module}{":Plugin" if "class Plugin" in source else ""}"
            [tool.setuptools]
            packages = ["{module}"]
        """)
        )
        projects.append(str(project))
    target = root / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(target),
            *projects,
        ],
        check=True,
        capture_output=True,
    )
    return target


def run(site, code, **env):
    full = {**os.environ, "PYTHONPATH": str(site), **env}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def statuses(site, **env):
    out = run(
        site,
        """
        import json, interop
        print(json.dumps([i.__dict__ for i in interop.adapters()]))
    """,
        **env,
    )
    return {(i["name"], i["distribution"]): i for i in json.loads(out)}


def test_broken_plugins_are_reported_and_isolate(site):
    infos = statuses(site)
    broken = infos[("brokenimport", "interop-broken-import")]
    assert broken["status"] == "broken" and "libtoy.so" in broken["error"]
    load = infos[("brokenload", "interop-broken-load")]
    assert load["status"] == "broken" and "cannot initialise" in load["error"]
    assert infos[("numpy", "interop-numpy")]["status"] == "loaded"
    out = run(
        site,
        """
        import numpy, interop
        a = numpy.arange(3.0)
        print(interop.convert(a, "numpy") is a)
        try:
            interop.convert(a, "brokenimport")
        except interop.BrokenAdapterError as e:
            print("broken:", e)
    """,
    )
    assert out.splitlines()[0] == "True"
    assert "broken:" in out and "libtoy.so" in out and "interop-broken-import" in out


def test_half_installed_plugin_is_broken_not_fatal(site):
    info = statuses(site)[("half", "interop-half")]
    assert info["status"] == "broken" and "NotImplementedError" in info["error"]


def test_unsupported_framework_version_is_reported_not_used(site):
    info = statuses(site)[("oldnumpy", "interop-old-numpy")]
    assert info["status"] == "unsupported version"
    assert ">=0.1,<1.0" in info["error"] and "numpy" in info["error"]


def test_same_name_first_distribution_wins_and_the_other_is_shadowed(site):
    infos = statuses(site)
    assert infos[("dup", "aaa-dup")]["status"] == "loaded"
    shadowed = infos[("dup", "zzz-dup")]
    assert shadowed["status"] == "shadowed" and "aaa-dup" in shadowed["error"]


def test_disable_by_name_or_distribution(site):
    infos = statuses(site, INTEROP_DISABLE="lazy, aaa-dup")
    assert infos[("lazy", "interop-lazy")]["status"] == "disabled"
    assert infos[("dup", "aaa-dup")]["status"] == "disabled"
    assert infos[("dup", "zzz-dup")]["status"] == "loaded"  # the other one takes the name
    out = run(
        site,
        """
        import numpy, interop
        try:
            interop.convert(numpy.ones(2), "lazy")
        except interop.UnknownFrameworkError as e:
            print(e)
    """,
        INTEROP_DISABLE="lazy",
    )
    assert "disabled by INTEROP_DISABLE" in out


def test_adapters_load_only_when_their_framework_is_involved(site):
    out = run(
        site,
        """
        import sys, numpy, interop
        interop.convert(numpy.ones(2), "numpy")
        interop.inspect(numpy.ones(2))
        print(sorted(m for m in sys.modules if m.startswith(("interop_", "aaa", "zzz"))))
    """,
    )
    assert out.strip() == "['interop_numpy']"


def test_interop_list_shows_every_status(site):
    out = run(site, "from interop.cli import main; main(['list'])")
    for word in ("broken", "shadowed", "unsupported version", "loaded", "libtoy.so"):
        assert word in out


def test_runtime_registration_follows_the_same_contract():
    import interop

    class Toy(interop.Adapter):
        name = "numpy"
        modules = ("toy",)

    with pytest.raises(interop.AdapterError, match="capabilities"):
        interop.register(Toy())

    class Declared(Toy):
        def capabilities(self):
            return interop.Capabilities(frozenset(), frozenset())

    with pytest.raises(interop.AdapterError, match="already exists"):
        interop.register(Declared())
    with pytest.raises(interop.AdapterError, match="not an interop.Adapter"):
        interop.register(object())  # type: ignore[arg-type]
