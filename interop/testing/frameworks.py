"""Frameworks as a user's cross-framework test sees them: the `framework` fixture's handle.

The pytest plugin (`interop_pytest`) parametrizes tests over `Framework` handles; this module
decides which frameworks and devices a run selects, and whether a framework can hold a dtype
there, from the adapters alone (their capabilities and the plan), so a plugin's framework is
tested exactly like ours.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import api
from ..dlpack import DTYPE_CODES
from ..errors import InteropError, UnsupportedDTypeError
from ..grad.structure import dtype_name
from ..info import Device
from ..registry import FRAMEWORKS, LOADED, REGISTRY, missing_adapters

#: the device types `--devices` takes
DEVICE_TYPES = ("cpu", "cuda", "rocm")


class SelectionError(ValueError):
    """An option or marker names a framework, device or dtype that cannot be used; the
    message says which and what would work."""


@dataclass(frozen=True)
class Choice:
    """One (framework, device) a test runs on, and why it is skipped here (or None)."""

    name: str
    device: str
    skip: str | None = None

    @property
    def id(self) -> str:
        return f"{self.name}-{self.device}"


def _usable_names() -> list[str]:
    """Every adapter that loads and whose framework is installed, by name."""
    return [
        info.name
        for info in REGISTRY.infos()
        if info.status == LOADED and info.framework_installed and not info.unavailable
    ]


def _known_names() -> dict[str, str]:
    """Every spelling of a framework name this registry knows -> the adapter's name."""
    known = {name: name for name in FRAMEWORKS}
    for info in REGISTRY.infos():
        known[info.name] = info.name
    for adapter in REGISTRY.loaded():
        for alias in adapter.aliases:
            known[alias.lower()] = adapter.name
    return known


def canonical_name(text: str, what: str) -> str:
    """The adapter name `text` spells (a name or an alias); SelectionError listing the known
    ones otherwise. `what` says where the name came from, for the message."""
    known = _known_names()
    name = known.get(text.strip().lower())
    if name is None:
        listed = ", ".join(sorted(set(known.values())))
        raise SelectionError(f"{what}: unknown framework {text!r}; known: {listed}")
    return name


def canonical_dtype(text: Any, what: str) -> str:
    """The DLPack name of a dtype given by name or as a framework's dtype object."""
    name = dtype_name(text) if not isinstance(text, str) else text.strip().lower()
    if name not in DTYPE_CODES:
        listed = " ".join(DTYPE_CODES)
        raise SelectionError(f"{what}: unknown dtype {text!r}; known: {listed}")
    return name


def _not_installed(name: str) -> str:
    """Why framework `name` cannot be selected, with the line that installs what is missing."""
    hint = missing_adapters().get(name)
    if hint is not None:
        return f"{name} is installed but its adapter is not ({hint})"
    for info in REGISTRY.infos():
        if info.name == name:
            return info.unavailable or info.error or f"{name}'s adapter is {info.status}"
    return f"{name} has no adapter here (pip install interop-{name})"


def parse_devices(text: str) -> list[str]:
    """`--devices`: comma-separated device types, each known."""
    devices = [d.strip().lower() for d in text.split(",") if d.strip()]
    for device in devices:
        if device not in DEVICE_TYPES:
            raise SelectionError(
                f"--devices: unknown device {device!r}; known: {', '.join(DEVICE_TYPES)}"
            )
    if not devices:
        raise SelectionError("--devices: name at least one device, e.g. --devices=cpu")
    return list(dict.fromkeys(devices))


def select(frameworks: str | None, devices: Sequence[str]) -> list[Choice]:
    """The (framework, device) pairs a run covers. Named frameworks must be usable here
    (SelectionError with the install line if not); by default every usable framework that runs
    on one of `devices`. A pair whose device is not visible is kept, skipped with the reason."""
    if frameworks is None:
        names = sorted(_usable_names())
    else:
        wanted = [t for t in frameworks.split(",") if t.strip()]
        names = list(dict.fromkeys(canonical_name(t, "--frameworks") for t in wanted))
        usable = set(_usable_names())
        for name in names:
            if name not in usable:
                raise SelectionError(f"--frameworks: {_not_installed(name)}")
    choices = []
    for name in names:
        adapter = REGISTRY.get(name)
        declared = adapter.capabilities().devices
        runs = [d for d in devices if d in declared]
        if not runs and frameworks is not None:
            raise SelectionError(
                f"--frameworks: {name} runs on {', '.join(sorted(declared))}, "
                f"not on --devices={','.join(devices)}"
            )
        for device in runs:
            choices.append(Choice(name, device, adapter.device_unavailable(Device(device))))
    return choices


def numpy_dtype(name: str) -> Any:
    """NumPy's dtype for a DLPack dtype name (ml_dtypes' for bfloat16 and float8), or raise
    UnsupportedDTypeError saying what would provide it."""
    import numpy as np

    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:
        raise UnsupportedDTypeError(
            f"NumPy has no {name} without ml_dtypes (pip install ml_dtypes)"
        ) from None
    found = getattr(ml_dtypes, name, None)
    if found is None:
        raise UnsupportedDTypeError(f"neither NumPy nor ml_dtypes has {name}")
    return np.dtype(found)


@functools.cache
def dtype_problem(name: str, device: str, dtype: str) -> str | None:
    """Why framework `name` cannot hold `dtype` on `device` here, in the plan's words (JAX
    without x64, MXNet and bfloat16, ...), or None. Asked of the plan for a NumPy array of
    that dtype, so the answer is exactly what `convert` would do."""
    import numpy as np

    try:
        sample = np.zeros((1,), numpy_dtype(dtype))
    except UnsupportedDTypeError as exc:
        return str(exc)
    try:
        plan = api.explain(sample, name, device=device)
    except InteropError as exc:
        return str(exc)
    error = getattr(plan, "error", None)
    return None if error is None else str(error)


def dtype_note(name: str, dtype: str) -> str | None:
    """What framework `name`'s adapter says of its tensors in `dtype` (`Capabilities.dtype_notes`:
    few kernels, ...), or None: named beside a test that failed in that dtype there."""
    try:
        return REGISTRY.get(name).capabilities().dtype_notes.get(dtype)
    except InteropError:
        return None


def _is_python_data(x: Any) -> bool:
    return isinstance(x, (bool, int, float, complex, list, tuple))


#: Python numbers become what the deep-learning frameworks make of them, not NumPy's float64
_PYTHON_DEFAULTS = {"float64": "float32", "complex128": "complex64"}


class Framework:
    """One framework on one device, as a test uses it: its namespace and a way in and out.

    `asarray` takes any framework's tensor (shared where memory can be shared, through
    `interop.convert`), NumPy arrays, scalars and nested lists; `numpy` reads anything back.
    """

    def __init__(self, name: str, device: str = "cpu") -> None:
        self.name = name
        self.device = device
        self.adapter = REGISTRY.get(name)

    def __repr__(self) -> str:
        return f"<Framework {self.name} on {self.device}>"

    @property
    def id(self) -> str:
        return f"{self.name}-{self.device}"

    @functools.cached_property
    def xp(self) -> Any:
        """The array namespace: `torch`, `jax.numpy`, `tf.experimental.numpy`, `mx.np`, ..."""
        return self.adapter.array_namespace()

    def supports(self, dtype: Any) -> str | None:
        """Why this framework cannot hold `dtype` on this device, or None if it can."""
        return dtype_problem(self.name, self.device, canonical_dtype(dtype, "dtype"))

    def _require(self, dtype: str) -> None:
        problem = dtype_problem(self.name, self.device, dtype)
        if problem is not None:
            raise UnsupportedDTypeError(problem)

    def asarray(self, x: Any, dtype: Any = None) -> Any:
        """`x` as this framework's array on this device, in `dtype` (a name or a framework's
        dtype) when given: never silently in another dtype (UnsupportedDTypeError)."""
        import numpy as np

        wanted = None if dtype is None else canonical_dtype(dtype, "asarray")
        if _is_python_data(x):
            x = np.asarray(x, dtype=None if wanted is None else numpy_dtype(wanted))
            if wanted is None:
                x = x.astype(self._default_dtype(x.dtype.name), copy=False)
        elif wanted is not None and api.inspect(x).dtype != wanted:
            x = to_numpy(x).astype(numpy_dtype(wanted))
        if wanted is not None:
            self._require(wanted)
        result = api.convert(x, self.name, device=self.device)
        return self.adapter.namespace_array(result)

    def _default_dtype(self, name: str) -> str:
        name = _PYTHON_DEFAULTS.get(name, name)
        if name == "int64" and dtype_problem(self.name, self.device, "int64"):
            return "int32"  # JAX without x64 holds no int64
        return name

    def numpy(self, x: Any) -> Any:
        """`x` (any framework's tensor) as a NumPy array on the host."""
        return to_numpy(x)

    def dtype(self, name: str) -> Any:
        """This framework's dtype object for a dtype name (`torch.bfloat16`, ...)."""
        wanted = canonical_dtype(name, "dtype")
        self._require(wanted)
        return self.asarray(np_zeros(wanted)).dtype


def np_zeros(dtype: str) -> Any:
    import numpy as np

    return np.zeros((1,), numpy_dtype(dtype))


def to_numpy(x: Any) -> Any:
    """Any tensor, NumPy array, scalar or nested list as a NumPy array on the host, shared
    where memory can be shared. A torch tensor that requires grad is read detached: a test
    reads its values, it does not write them."""
    import numpy as np

    if isinstance(x, np.ndarray):
        return x
    if _is_python_data(x) or isinstance(x, np.generic):
        return np.asarray(x)
    detach = getattr(x, "detach", None)
    if getattr(x, "requires_grad", False) and callable(detach):
        x = detach()
    return api.convert(x, "numpy", device="cpu")


def describe(x: Any) -> str:
    """`torch float32 on cpu`, `list`, ...: what a side of a comparison is, for messages."""
    if _is_python_data(x):
        return type(x).__name__
    try:
        info = api.inspect(x)
    except InteropError:
        return type(x).__name__
    return f"{info.framework} {info.dtype} on {info.device}"


def validate_names(names: Iterable[str], what: str) -> list[str]:
    """Adapter names for marker arguments, each checked (SelectionError naming the unknown)."""
    return [canonical_name(n, what) for n in names]


@functools.cache
def handle(name: str, device: str) -> Framework:
    """The `Framework` for (name, device), made once per process (its `xp` is looked up
    once)."""
    return Framework(name, device)
