"""Process setup and the record of where a run happened (machine, versions, date).

Import this before any framework: it quiets TensorFlow, keeps JAX on the CPU unless told
otherwise, and imports MXNet only through its adapter's NumPy-2 compatibility shim.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = Path(__file__).resolve().parent.parent

#: distributions whose versions a run records, when installed
DISTRIBUTIONS = (
    "numpy",
    "torch",
    "jax",
    "jaxlib",
    "tensorflow",
    "tensorflow-cpu",
    "mxnet",
    "paddlepaddle",
    "cupy",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "ml_dtypes",
)


#: frameworks that crash the process when imported after TensorFlow (Paddle 3.3.1 segfaults in
#: paddle/base/core.py after `import tensorflow`; the other order works)
BEFORE_TENSORFLOW = ("paddle",)


def import_order(modules: list[str]) -> list[str]:
    """`modules` in an order that imports safely (Paddle before TensorFlow)."""
    return sorted(modules, key=lambda m: (m != "numpy", m not in BEFORE_TENSORFLOW))


def import_framework(module: str) -> Any:
    """Import a framework module; MXNet only through its adapter's NumPy 2 shim."""
    if module == "mxnet" and "mxnet" not in sys.modules:
        shim = importlib.import_module("interop_mxnet")  # ImportError: no adapter, no MXNet
        if hasattr(shim, "import_mxnet"):
            return shim.import_mxnet()
        compat = getattr(shim, "numpy_compat", None)
        if compat is not None and hasattr(compat, "apply"):
            compat.apply()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No ccache found")  # paddle, at import
        return importlib.import_module(module)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _git() -> str | None:
    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "interop", "adapters")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + (" (core or adapters modified)" if dirty else "")


def machine() -> dict[str, Any]:
    """Where and when this run happened, and with which versions."""
    import interop

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    threads = {}
    if "torch" in sys.modules:
        threads["torch"] = sys.modules["torch"].get_num_threads()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": _memory_gib(),
        "load_average": [round(v, 2) for v in load] if load else None,
        "python": sys.version.split()[0],
        "interop": getattr(interop, "__version__", None),
        "git": _git(),
        "intra_op_threads": threads,
        "versions": {d: v for d in DISTRIBUTIONS if (v := _version(d)) is not None},
        "env": {
            k: os.environ[k]
            for k in (
                "TF_CPP_MIN_LOG_LEVEL",
                "JAX_PLATFORMS",
                "INTEROP_DISABLE",
                "INTEROP_PURE_PYTHON",
                "INTEROP_IMMUTABLE",
            )
            if k in os.environ
        },
    }
