"""interop-hub's pytest plugin: one test, run in every framework, results compared.

Registered through the `pytest11` entry point (name `interop`): installing interop-hub is
enough. A test that takes the `framework` fixture runs once per selected framework and device
(`--frameworks`, `--devices`); `@pytest.mark.dtypes(...)` parametrizes the `dtype` fixture and
skips, with the adapter's own reason, a dtype a framework cannot hold. docs/testing.md shows
it all.

This module is loaded by every pytest run of a machine with interop-hub installed, so it
imports neither interop nor any framework until a test asks for the `framework` fixture or an
option of ours is given: a run that does not use it pays for nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import pytest

if TYPE_CHECKING:
    from interop.testing.frameworks import Choice, Framework

#: the marker each of our parameters carries, so reports can be tallied per framework
_TAG = "interop_framework"
#: (framework name, dtype) of a test parametrized by both, for the adapters' dtype notes
_DTYPE_TAG = "interop_dtype"
_MARKERS = {
    "frameworks(*names)": "run the framework fixture only in these frameworks (within "
    "--frameworks)",
    "skip_frameworks(**reasons)": "skip these frameworks, e.g. skip_frameworks(jax='why')",
    "xfail_frameworks(strict=False, **reasons)": "expect these frameworks to fail, "
    "e.g. xfail_frameworks(tensorflow='why', strict=True)",
    "dtypes(*names)": "parametrize the dtype fixture over these dtypes; a framework that "
    "cannot hold one skips it with the reason",
    f"{_TAG}(id)": "set by interop's plugin on each framework parameter (internal)",
}
_STATE = pytest.StashKey["_State"]()
T = TypeVar("T")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("interop", "cross-framework tests (interop-hub)")
    group.addoption(
        "--frameworks",
        dest="interop_frameworks",
        default=None,
        metavar="NAMES",
        help="comma-separated frameworks the `framework` fixture runs in, by name or alias "
        "(torch,jax,tensorflow,...); default: every framework whose adapter loads here and "
        "runs on --devices",
    )
    group.addoption(
        "--devices",
        dest="interop_devices",
        default="cpu",
        metavar="TYPES",
        help="comma-separated device types the `framework` fixture runs on: cpu, cuda, rocm "
        "(default cpu); a device not visible here skips its cases with the reason",
    )


class _State:
    """The run's selection, worked out the first time a test needs it."""

    def __init__(self, config: pytest.Config) -> None:
        self.frameworks: str | None = config.getoption("interop_frameworks")
        self.devices: str = config.getoption("interop_devices")
        self._choices: list[Choice] | None = None

    def choices(self) -> list[Choice]:
        if self._choices is None:
            from interop.testing import frameworks

            try:
                devices = frameworks.parse_devices(self.devices)
                self._choices = frameworks.select(self.frameworks, devices)
            except frameworks.SelectionError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self._choices


def pytest_configure(config: pytest.Config) -> None:
    for marker, text in _MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {text}")
    state = config.stash[_STATE] = _State(config)
    if state.frameworks is not None or state.devices != "cpu":
        state.choices()  # options given: a usage error now, not in the first test
    config.pluginmanager.register(_Tally(), "interop-tally")


def _parametrized_by_user(metafunc: pytest.Metafunc, name: str) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def _ours(metafunc: pytest.Metafunc, name: str) -> bool:
    """Whether `name` is a fixture the test takes and that resolves to this plugin's."""
    if name not in metafunc.fixturenames or _parametrized_by_user(metafunc, name):
        return False
    definitions = getattr(metafunc, "_arg2fixturedefs", {}).get(name)
    if not definitions:
        return True
    func = getattr(definitions[-1], "func", None)
    return getattr(func, "__module__", __name__) == __name__


def _collection_error(metafunc: pytest.Metafunc, message: str) -> NoReturn:
    pytest.fail(f"{metafunc.definition.nodeid}: {message}", pytrace=False)


def _checked(metafunc: pytest.Metafunc, call: Callable[[], T]) -> T:
    """`call()`, its SelectionError made this test's collection error."""
    from interop.testing.frameworks import SelectionError

    try:
        return call()
    except SelectionError as exc:
        message = str(exc)
    _collection_error(metafunc, message)


def _reasons(metafunc: pytest.Metafunc, marker: str) -> tuple[dict[str, str], bool]:
    """{framework: reason} of every `marker` on the test (closest first), and its strict."""
    from interop.testing import frameworks

    reasons: dict[str, str] = {}
    strict = False
    for mark in metafunc.definition.iter_markers(marker):
        if mark.args:
            _collection_error(metafunc, f"@pytest.mark.{marker} takes name='reason' only")
        for key, reason in mark.kwargs.items():
            if key == "strict" and marker == "xfail_frameworks":
                strict = strict or bool(reason)
                continue
            spelled = partial(frameworks.canonical_name, key, f"@pytest.mark.{marker}")
            name = _checked(metafunc, spelled)
            reasons.setdefault(name, str(reason))
    return reasons, strict


def _framework_params(metafunc: pytest.Metafunc, state: _State) -> list[Any]:
    from interop.testing import frameworks

    only = None
    marker = metafunc.definition.get_closest_marker("frameworks")
    if marker is not None:
        names = marker.args
        only = set(
            _checked(metafunc, lambda: frameworks.validate_names(names, "@pytest.mark.frameworks"))
        )
    skips, _ = _reasons(metafunc, "skip_frameworks")
    xfails, strict = _reasons(metafunc, "xfail_frameworks")
    params = []
    for choice in state.choices():
        if only is not None and choice.name not in only:
            continue
        marks = [getattr(pytest.mark, _TAG)(choice.id)]
        if choice.skip:
            marks.append(pytest.mark.skip(reason=f"{choice.id}: {choice.skip}"))
        if choice.name in skips:
            marks.append(pytest.mark.skip(reason=f"{choice.id}: {skips[choice.name]}"))
        if choice.name in xfails:
            reason = f"{choice.id}: {xfails[choice.name]}"
            marks.append(pytest.mark.xfail(reason=reason, strict=strict))
        params.append(pytest.param(choice, id=choice.id, marks=marks))
    if not params:
        wanted = f" among {sorted(only)}" if only is not None else ""
        reason = f"no selected framework{wanted} (--frameworks, --devices) runs here"
        params.append(pytest.param(None, id="no-framework", marks=pytest.mark.skip(reason=reason)))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if _ours(metafunc, "framework"):
        state = metafunc.config.stash[_STATE]
        metafunc.parametrize("framework", _framework_params(metafunc, state), indirect=True)
    marker = metafunc.definition.get_closest_marker("dtypes")
    if marker is None or _parametrized_by_user(metafunc, "dtype"):
        return
    if "dtype" not in metafunc.fixturenames:
        _collection_error(
            metafunc,
            "@pytest.mark.dtypes parametrizes the `dtype` fixture, which this test does not take",
        )
    from interop.testing import frameworks

    where = "@pytest.mark.dtypes"
    names = _checked(metafunc, lambda: [frameworks.canonical_dtype(d, where) for d in marker.args])
    if not names:
        _collection_error(metafunc, "@pytest.mark.dtypes needs at least one dtype name")
    metafunc.parametrize("dtype", names, ids=names)


@pytest.fixture
def framework(request: pytest.FixtureRequest) -> Framework:
    """One selected framework on one device: `.name`, `.device`, `.xp` (its array
    namespace), `.asarray(x, dtype=None)`, `.numpy(x)`, `.dtype(name)`. Skips a `dtype` the
    framework cannot hold, with its adapter's reason."""
    from interop.testing.frameworks import dtype_problem, handle

    choice: Choice = request.param
    callspec = getattr(request.node, "callspec", None)
    dtype = callspec.params.get("dtype") if callspec is not None else None
    if isinstance(dtype, str):
        problem = dtype_problem(choice.name, choice.device, dtype)
        if problem is not None:
            pytest.skip(f"{choice.id} cannot hold {dtype}: {problem}")
    return handle(choice.name, choice.device)


@pytest.fixture
def dtype(request: pytest.FixtureRequest) -> str:
    """The dtype's name, parametrized by `@pytest.mark.dtypes(...)`."""
    pytest.fail("the `dtype` fixture needs @pytest.mark.dtypes('float32', ...)", pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tag = item.get_closest_marker(_TAG)
        if tag is not None:
            item.user_properties.append((_TAG, tag.args[0]))
            callspec = getattr(item, "callspec", None)
            choice = callspec.params.get("framework") if callspec is not None else None
            dtype = callspec.params.get("dtype") if callspec is not None else None
            name = getattr(choice, "name", None)  # (a Choice: not imported before a test runs)
            if isinstance(dtype, str) and isinstance(name, str):
                item.user_properties.append((_DTYPE_TAG, (name, dtype)))


class _Tally:
    """Passed / failed / skipped per framework, printed at the end of a run that used the
    `framework` fixture (under pytest-xdist too: reports carry their framework)."""

    COLUMNS = ("passed", "failed", "skipped", "xfailed")

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.skips: dict[str, Counter[str]] = defaultdict(Counter)
        #: failures per (framework id, framework name, dtype), for the adapters' dtype notes
        self.failed_in: Counter[tuple[str, str, str]] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        where = str(dict(report.user_properties).get(_TAG, ""))
        if not where:
            return
        row = self.counts[where]
        if report.failed:
            row["failed"] += 1
            in_dtype = dict(report.user_properties).get(_DTYPE_TAG)
            if isinstance(in_dtype, (tuple, list)):  # (a list once sent by pytest-xdist)
                name, dtype = in_dtype
                self.failed_in[where, name, dtype] += 1
        elif report.skipped and hasattr(report, "wasxfail"):
            row["xfailed"] += 1
        elif report.skipped:
            row["skipped"] += 1
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            self.skips[where][reason.removeprefix("Skipped: ")] += 1
        elif report.when == "call":
            row["passed"] += 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.counts:
            return
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", "interop: results per framework")
        width = max(len("framework"), *map(len, self.counts))
        write("framework".ljust(width) + "".join(f"{c:>9}" for c in self.COLUMNS))
        for where in sorted(self.counts):
            row = self.counts[where]
            write(where.ljust(width) + "".join(f"{row[c]:>9}" for c in self.COLUMNS))
        for where in sorted(self.skips):
            for reason, count in self.skips[where].items():
                write(f"skipped {count} on {where}: {reason}")
        if not self.failed_in:
            return
        from interop.testing.frameworks import dtype_note

        for (where, name, dtype), count in sorted(self.failed_in.items()):
            note = dtype_note(name, dtype)
            if note:  # the framework's own kernels may be why
                write(f"failed {count} on {where} in {dtype}; its adapter notes: {note}")
