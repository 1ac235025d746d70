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

np = pytest.importorskip("numpy")

CAPS = """
    def capabilities(self):
        from interop import Capabilities
        return Capabilities(export_dtypes=frozenset({"float32"}), import_dtypes=frozenset())
"""
# A plugin written for a contract this core does not implement must never be called: its
# capabilities() would leave this file behind.
TOUCHED = """
    def capabilities(self):
        import os
        open(os.environ["TOUCHED"], "w").close()
        raise AssertionError("a hook of an incompatible plugin was called")
"""


def plugin(name, modules, extra="", contract="(1, 0)", caps=CAPS):
    return (
        name,
        f"from interop import Adapter\nclass Plugin(Adapter):\n    name = {name!r}\n"
        f"    modules = {modules!r}\n    contract = {contract}\n{extra}{caps}",
    )


PLUGINS = {
    # distribution: (entry point name, module source[, requirements])
    "interop-broken-import": ("brokenimport", "raise ImportError('libtoy.so: cannot open')"),
    "interop-broken-load": (
        "brokenload",
        """
        from interop import Adapter
        class Plugin(Adapter):
            name = "brokenload"
            modules = ("brokenload_fw",)
            contract = (1, 0)
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
        "from interop import Adapter\nclass Plugin(Adapter):\n    name = 'half'\n"
        "    modules = ('half_fw',)\n    contract = (1, 0)\n",
    ),
    # a third party's adapter under a framework's name, its distribution sorting first
    "aaa-numpy-shadow": plugin("numpy", ("numpy",)),
    # broken plugins known by an alias: one fails to load, one fails its probe
    "interop-broken-alias": (
        "brokenalias",
        """
        from interop import Adapter
        class Plugin(Adapter):
            name = "brokenalias"
            aliases = ("balias",)
            modules = ("brokenalias_fw",)
            contract = (1, 0)
            def __init__(self):
                raise RuntimeError("cannot initialise the alias runtime")
        """,
    ),
    "interop-broken-probe": plugin(
        "brokenprobe",
        ("brokenprobe_fw",),
        '    aliases = ("bprobe",)\n',
        caps="    def capabilities(self):\n        raise RuntimeError('probe failed')\n",
    ),
    # a probe that fails once (as under a foreign tracer), then works
    "interop-flaky": plugin(
        "flaky",
        ("flaky_fw",),
        "    calls = []\n",
        caps="""
    def capabilities(self):
        from interop import Capabilities
        self.calls.append(1)
        if len(self.calls) == 1:
            raise RuntimeError("probe failed this once")
        return Capabilities(export_dtypes=frozenset({"float32"}), import_dtypes=frozenset())
""",
    ),
    "aaa-dup": plugin("dup", ("dup_a",)),
    "zzz-dup": plugin("dup", ("dup_z",)),
    "interop-lazy": plugin("lazy", ("lazy_fw",)),
    # the framework range written once, as the distribution's requirement on the framework
    "interop-numpy-range-out": (*plugin("rangeout", ("numpy",)), ["numpy>=0.5,<1.0"]),
    "interop-numpy-range-in": (*plugin("rangein", ("numpy",)), ["numpy>=1.0"]),
    # contracts
    "interop-future": plugin("future", ("future_fw",), contract="(3, 0)", caps=TOUCHED),
    "interop-newer-minor": plugin("newerminor", ("nm_fw",), contract="(2, 99)", caps=TOUCHED),
    "interop-newer-1x": plugin("newer1x", ("n1_fw",), contract="(1, 2)", caps=TOUCHED),
    "interop-ancient": plugin("ancient", ("anc_fw",), contract="(0, 9)", caps=TOUCHED),
    "interop-unversioned": plugin("unversioned", ("uv_fw",), contract="None", caps=TOUCHED),
    # a typo in a declared value
    "interop-typo": plugin(
        "typo",
        ("typo_fw",),
        caps=CAPS.replace(
            "import_dtypes=frozenset()", "import_dtypes=frozenset(), imports={'objekt'}"
        ),
    ),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A folder with the throwaway plugins pip-installed into it."""
    root = tmp_path_factory.mktemp("plugins")
    projects = []
    for dist, (entry, source, *requires) in PLUGINS.items():
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
            dependencies = {requires[0] if requires else []!r}
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
    return run_full(site, code, **env)[0]


def run_full(site, code, **env):
    """(stdout, stderr) of `code` run in a fresh interpreter that sees `site`."""
    full = {**os.environ, "PYTHONPATH": str(site), **env}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full
    )
    assert out.returncode == 0, out.stderr
    return out.stdout, out.stderr


STATUSES = """
    import json, interop
    print(json.dumps([i.__dict__ for i in interop.adapters()]))
"""


def statuses(site, **env):
    out = run(site, STATUSES, **env)
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


LISTED = """
    import json, numpy, interop
    from interop.cli import main
    a = numpy.arange(3.0)
    print(interop.convert(a, "numpy") is a)
    main(["list"])
    print(json.dumps([i.__dict__ for i in interop.adapters()]))
"""


def test_the_frameworks_own_distribution_wins_over_a_third_party_one(site):
    out, err = run_full(site, LISTED)
    lines = out.splitlines()
    assert lines[0] == "True"  # NumPy's own adapter converted (the shadow exports no float64)
    infos = {(i["name"], i["distribution"]): i for i in json.loads(lines[-1])}
    assert infos[("numpy", "interop-numpy")]["status"] == "loaded"
    shadow = infos[("numpy", "aaa-numpy-shadow")]
    assert shadow["status"] == "shadowed", shadow
    assert "shadowed by interop-numpy" in shadow["error"]
    assert "INTEROP_ADAPTER_NUMPY=aaa-numpy-shadow" in shadow["error"]
    row = next(r for r in lines if r.startswith("numpy ") and "aaa-numpy-shadow" in r)
    assert "shadowed" in row and "shadowed by interop-numpy" in row
    # one warning, of interop's own class, naming both distributions and the setting
    assert err.count("named 'numpy'") == 1, err
    warning = next(r for r in err.splitlines() if "named 'numpy'" in r)
    assert "ShadowedAdapterWarning" in warning
    assert "named 'numpy'" in warning and "interop-numpy is used" in warning, warning
    assert "aaa-numpy-shadow shadowed" in warning and "INTEROP_ADAPTER_NUMPY=" in warning


def test_a_setting_chooses_another_distribution_for_a_name(site):
    out, err = run_full(site, STATUSES, INTEROP_ADAPTER_NUMPY="aaa-numpy-shadow")
    infos = {(i["name"], i["distribution"]): i for i in json.loads(out.splitlines()[-1])}
    assert infos[("numpy", "aaa-numpy-shadow")]["status"] == "loaded"
    own = infos[("numpy", "interop-numpy")]
    assert own["status"] == "shadowed" and "shadowed by aaa-numpy-shadow" in own["error"]
    assert "named 'numpy'" not in err  # chosen by name: nothing to warn about
    assert "named 'dup'" in err  # an unchosen name still warns


def test_the_warning_class_is_interops():
    import interop

    assert issubclass(interop.ShadowedAdapterWarning, UserWarning)


@pytest.mark.parametrize(
    ("alias", "name", "words"),
    [("balias", "brokenalias", "cannot initialise"), ("bprobe", "brokenprobe", "probe failed")],
)
def test_a_broken_plugin_named_by_its_alias_is_reported_broken(site, alias, name, words):
    code = f"""
        import numpy, interop
        for to in ({name!r}, {alias!r}, {alias.upper()!r}):
            try:
                interop.convert(numpy.ones(2), to)
            except interop.BrokenAdapterError as e:
                print("broken:", e)
            except interop.InteropError as e:
                print("other:", type(e).__name__, e)
        """
    lines = run(site, code).splitlines()
    assert len(lines) == 3, lines
    for line in lines:
        assert line.startswith("broken:"), line
        assert repr(name) in line and words in line, line


def test_a_failed_probe_is_tried_again_not_cached_as_broken(site):
    out = run(
        site,
        """
        import interop
        from interop.registry import REGISTRY
        try:
            REGISTRY.get("flaky")
        except interop.BrokenAdapterError as e:
            print("first:", e)
        print({i.name: i.status for i in interop.adapters()}["flaky"])
        print(type(REGISTRY.get("flaky")).__name__, REGISTRY.get("flaky").calls)
        """,
    )
    first, status, again = out.splitlines()
    assert first.startswith("first:") and "probe failed this once" in first
    assert status == "loaded"
    assert again == "Plugin [1, 1, 1]"  # the failed probe, the probe again, the listing


def test_no_adapter_loads_while_a_foreign_tracer_traces(site):
    out = run(
        site,
        """
        import interop
        from interop.registry import REGISTRY
        TRACING = []

        class Tracer(interop.Adapter):
            name = "toytracer"
            modules = ("toytracer_fw",)
            contract = (1, 0)
            def capabilities(self):
                return interop.Capabilities(frozenset({"float32"}), frozenset())
            def tracer(self):
                return "toy.jit" if TRACING else None

        interop.register(Tracer())  # (which loads every adapter: flaky's first probe fails)
        import interop_flaky
        probes = len(interop_flaky.Plugin.calls)
        TRACING.append(1)
        try:
            REGISTRY.get("flaky")
        except interop.TracingError as e:
            print("refused:", e)
        print(probes, len(interop_flaky.Plugin.calls))
        TRACING.clear()
        print(type(REGISTRY.get("flaky")).__name__)
        print({i.name: i.status for i in interop.adapters()}["flaky"])
        """,
    )
    refused, probes, again, status = out.splitlines()
    assert refused.startswith("refused:") and "'flaky'" in refused and "toy.jit" in refused
    assert probes == "1 1"  # not probed under the tracer
    assert again == "Plugin" and status == "loaded"  # probed again outside it: loaded


TORCH_COMPILE = """
    import torch, interop
    f = torch.compile(lambda t: interop.convert(t, "numpy"))
    try:
        r = f(torch.arange(4.0))
        print("compiled:", r.tolist(), (r + 1).sum())
    except interop.InteropError as e:
        print("compiled:", type(e).__name__)
    t = torch.arange(3.0)
    a = interop.convert(t, "numpy")
    print(a.__array_interface__["data"][0] == t.data_ptr(), (a + 1).sum())
    print({i.name: i.status for i in interop.adapters()}["numpy"])
"""


def test_a_conversion_under_torch_compile_leaves_numpy_usable():
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TORCH_COMPILE)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    compiled, eager, status = out.stdout.splitlines()
    assert compiled in ("compiled: [0.0, 1.0, 2.0, 3.0] 10.0", "compiled: TracingError"), compiled
    assert eager == "True 6.0"  # shared memory, and NumPy's own kernel on it
    assert status == "loaded"


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


def test_framework_range_is_read_from_the_distributions_requirements(site):
    infos = statuses(site)
    out = infos[("rangeout", "interop-numpy-range-out")]
    assert out["status"] == "unsupported version", out
    assert ">=0.5,<1.0" in out["error"] and f"numpy {np.__version__}" in out["error"]
    assert infos[("rangein", "interop-numpy-range-in")]["status"] == "loaded"


@pytest.mark.parametrize(
    ("entry", "dist", "words"),
    [
        ("future", "interop-future", ["3.0", "implements contract 2.1"]),
        ("newerminor", "interop-newer-minor", ["2.99", "implements contract 2.1"]),
        # the 1.x shim loads 1.0 and 1.1 adapters only
        ("newer1x", "interop-newer-1x", ["1.2", "loads 1.0-1.1 adapters through its shim"]),
        ("ancient", "interop-ancient", ["0.9", "implements contract 2.1"]),
        ("unversioned", "interop-unversioned", ["declares no contract version"]),
    ],
)
def test_plugin_for_another_contract_is_reported_and_never_called(
    site, tmp_path, entry, dist, words
):
    touched = tmp_path / "touched"
    info = statuses(site, TOUCHED=str(touched))[(entry, dist)]
    assert info["status"] == "incompatible contract", info
    assert all(word in info["error"] for word in words), info["error"]
    out = run(
        site,
        f"""
        import numpy, interop
        try:
            interop.convert(numpy.ones(2), {entry!r})
        except interop.BrokenAdapterError as e:
            print("refused:", e)
        """,
        TOUCHED=str(touched),
    )
    assert out.startswith("refused:") and "contract" in out
    assert not touched.exists(), "a hook of an incompatible plugin was called"


def test_a_typo_in_capabilities_breaks_the_plugin_naming_the_field(site):
    info = statuses(site)[("typo", "interop-typo")]
    assert info["status"] == "broken"
    assert "Capabilities.imports" in info["error"] and "'objekt'" in info["error"]


def test_interop_list_shows_every_status(site):
    out = run(site, "from interop.cli import main; main(['list'])")
    for word in (
        "broken",
        "shadowed",
        "unsupported version",
        "incompatible contract",
        "loaded",
        "libtoy.so",
    ):
        assert word in out


def test_runtime_registration_follows_the_same_contract():
    import interop

    class Toy(interop.Adapter):
        name = "numpy"
        modules = ("toy",)
        contract = (1, 0)

    with pytest.raises(interop.AdapterError, match="capabilities"):
        interop.register(Toy())

    class Declared(Toy):
        def capabilities(self):
            return interop.Capabilities(frozenset(), frozenset())

    with pytest.raises(interop.AdapterError, match="already exists"):
        interop.register(Declared())
    with pytest.raises(interop.AdapterError, match="not an interop.Adapter"):
        interop.register(object())  # type: ignore[arg-type]


def test_runtime_registration_checks_the_contract_version():
    import interop

    class Future(interop.Adapter):
        name = "future"
        modules = ("future_fw",)
        contract = (3, 0)

        def capabilities(self):
            raise AssertionError("never called")

    with pytest.raises(interop.AdapterError, match=r"contract 3\.0.*implements contract 2\.1"):
        interop.register(Future())
    Future.contract = (0, 9)
    with pytest.raises(interop.AdapterError, match=r"contract 0\.9.*implements contract 2\.1"):
        interop.register(Future())
    Future.contract = None  # type: ignore[assignment]
    with pytest.raises(interop.AdapterError, match="declares no contract version"):
        interop.register(Future())
    Future.contract = "1.0"  # type: ignore[assignment]
    with pytest.raises(interop.AdapterError, match=r"\(major, minor\)"):
        interop.register(Future())


@pytest.mark.parametrize(
    ("attribute", "value", "words"),
    [
        ("modules", "toy_fw", "modules must be a tuple of strings"),
        ("modules", (), "modules must name"),
        ("aliases", ("ok", 3), "aliases must be a tuple of strings"),
        ("supported_versions", ("1.0",), "supported_versions must be"),
    ],
)
def test_runtime_registration_checks_declared_attributes(attribute, value, words):
    import interop

    class Toy(interop.Adapter):
        name = "toycheck"
        modules = ("toy_fw",)
        contract = (1, 0)

        def capabilities(self):
            return interop.Capabilities(frozenset(), frozenset())

    setattr(Toy, attribute, value)
    with pytest.raises(interop.AdapterError, match=words):
        interop.register(Toy())


# --- Capabilities: every declared value is checked when it is made -------------------------------
def _caps(**fields):
    from interop import Capabilities

    base = {"export_dtypes": frozenset({"float32"}), "import_dtypes": frozenset({"float32"})}
    return Capabilities(**{**base, **fields})


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("export_dtypes", {"float32", "flaot64"}, "unknown dtype 'flaot64'"),
        ("import_dtypes", "float32", "expected a set of dtype"),
        ("import_dtypes", [["float32"]], "expected a set of dtype"),
        ("devices", None, "expected a set of device"),
        ("exports", {"dlpack", "dlpak"}, "unknown ExportProtocol 'dlpak'"),
        ("exports", {"object"}, "unknown ExportProtocol 'object'"),  # an import protocol
        ("imports", {"objekt"}, "unknown ImportProtocol 'objekt'"),
        ("devices", {"gpu"}, "unknown device 'gpu'"),
        ("devices", frozenset(), "at least one device"),
        ("import_layouts", {"canonical", "c_contiguous"}, "unknown layout 'c_contiguous'"),
        ("import_alignment", 48, "power of two"),
        ("import_alignment", 0, "power of two"),
        ("import_alignment", True, "power of two"),
        ("unaligned_import", "copies", "'copies' is not one of 'copy', 'refuse'"),
        ("alignment_by_device", {"cuda": 16}, "(device, alignment, unaligned) tuples"),
        ("alignment_by_device", (("cpu", 24, "refuse"),), "power of two"),
        ("alignment_by_device", (("gpu", 16, "refuse"),), "unknown device 'gpu'"),
        ("alignment_by_device", (("cuda", 16, "refuse"),), "not in devices"),
        ("alignment_by_device", (("cpu", 16, "fails"),), "'fails' is not one of"),
        ("import_byte_offset", "no", "expected True or False"),
        ("import_access", "read_only", "not one of 'writable', 'read_only_flag', 'immutable'"),
        ("immutable", 1, "expected True or False"),
        ("legacy_import_read_only", None, "expected True or False"),
        ("writable_legacy_import", "yes", "expected True or False"),
        ("writable_legacy_import", True, "needs legacy_import_read_only"),
        ("moves_to", {"cuda", "tpu"}, "unknown device 'tpu'"),
        ("moves_from", {"host"}, "unknown device 'host'"),
        ("import_copies", {"cuda"}, "not in devices"),
        ("import_gaps", {"bfloat17": "why"}, "unknown dtype 'bfloat17'"),
        ("import_gaps", {"bfloat16": ""}, "needs a reason"),
        ("import_gaps", {"float32": "taken wrongly"}, "also in import_dtypes"),
        ("import_gaps", ["bfloat16"], "mapping"),
        ("dtype_notes", {"bfloat16": "few kernels"}, "not in import_dtypes"),
        ("dtype_notes", {"float32": ""}, "needs a reason"),
        ("dtype_notes", "float32", "mapping"),
        ("dlpack_version", (1,), "(major, minor)"),
        ("dlpack_version", (9, 0), "(major, minor)"),
        ("dlpack_version", "1.0", "(major, minor)"),
        ("notes", "one note", "tuple of strings"),
    ],
)
def test_a_wrong_capability_value_raises_naming_the_field(field, value, words):
    import interop

    with pytest.raises(interop.AdapterError) as info:
        _caps(**{field: value})
    message = str(info.value)
    assert message.startswith(f"Capabilities.{field}:"), message
    assert words in message, message


def test_declared_values_are_enums_equal_to_the_old_strings():
    from interop.adapter import (
        CAPSULE,
        DLPACK,
        IMMUTABLE,
        OBJECT,
        Access,
        ExportProtocol,
        ImportProtocol,
    )

    caps = _caps(
        exports={"dlpack", "capsule"},  # plain strings and sets, as contract 0 plugins wrote
        imports=[CAPSULE, "object_legacy"],  # the shared CAPSULE constant works for imports
        import_access="immutable",
        devices={"cpu"},
    )
    assert caps.exports == frozenset({ExportProtocol.DLPACK, ExportProtocol.CAPSULE})
    assert caps.imports == frozenset({ImportProtocol.CAPSULE, ImportProtocol.OBJECT_LEGACY})
    assert all(type(p) is ExportProtocol for p in caps.exports)
    assert all(type(p) is ImportProtocol for p in caps.imports)
    assert "dlpack" in caps.exports and DLPACK in caps.exports and OBJECT not in caps.imports
    assert caps.import_access == "immutable" and caps.import_access is Access.IMMUTABLE
    assert IMMUTABLE == "immutable" and hash(IMMUTABLE) == hash("immutable")
    assert f"{DLPACK}" == str(DLPACK) == "dlpack"
    assert isinstance(caps.devices, frozenset) and isinstance(caps.import_layouts, frozenset)
    assert caps.wants_versioned is False  # object_legacy and capsule only
    assert hash(_caps(notes=["a"])) == hash(_caps(notes=("a",)))  # hashable, normalised


def test_every_shipped_adapter_declares_contract_2_and_valid_capabilities():
    import interop
    from interop.adapter import CONTRACT_VERSION, check_adapter
    from interop.registry import REGISTRY
    from interop.roles import StandIns

    assert CONTRACT_VERSION == (2, 1)
    loaded = {a.name: a for a in REGISTRY.loaded()}
    assert {"numpy"} <= set(loaded)
    ours = {"numpy", "torch", "jax", "tensorflow", "mxnet", "paddle", "cupy", "mlx"}
    shipped = [loaded[name] for name in ours & set(loaded)]  # (tests register others)
    assert all(type(a).__module__.startswith("interop_") for a in shipped), shipped
    for adapter in shipped:  # none through the 1.x shim; 2.1 where it takes StandIns
        want = (2, 1) if isinstance(adapter, StandIns) else (2, 0)
        assert type(adapter).contract == want, adapter
        assert isinstance(check_adapter(adapter), interop.Capabilities)


def test_the_exchange_object_protocol_matches_the_core_exchange():
    """Adapters are told (ExchangeObject) what they may call on what `from_dlpack` receives:
    the core's exchange object must offer exactly that, with the same signatures."""
    import inspect

    from interop.adapter import ExchangeObject
    from interop.exchange import Exchange

    a = np.arange(6.0)
    exchange = Exchange.from_source(a, versioned=True, framework="numpy")
    assert isinstance(exchange, ExchangeObject)
    members = ("take", "take_as", "retag", "release", "__dlpack__", "__dlpack_device__")
    for member in members:
        declared = inspect.signature(getattr(ExchangeObject, member))
        actual = inspect.signature(getattr(Exchange, member))
        assert list(declared.parameters) == list(actual.parameters), member
    assert isinstance(inspect.getattr_static(Exchange, "versioned"), property)
    versioned = np.lib.NumpyVersion(np.__version__) >= "2.1.0"  # NumPy's versioned exports
    assert exchange.info.shape == (6,) and exchange.versioned == versioned
    assert exchange.__dlpack_device__() == (1, 0)
    y = np.from_dlpack(exchange)
    assert y.__array_interface__["data"][0] == a.__array_interface__["data"][0]
