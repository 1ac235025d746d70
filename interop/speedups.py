"""Whether the optional compiled accelerator (interop._speedups) is used: built, and not
switched off with INTEROP_PURE_PYTHON=1. Every user of it has a pure-Python twin."""

from __future__ import annotations

import importlib
import os
from typing import Any

PURE_ENV = "INTEROP_PURE_PYTHON"

SPEEDUPS: Any
try:
    if os.environ.get(PURE_ENV, "").strip() not in ("", "0"):
        raise ImportError(f"{PURE_ENV} is set")
    SPEEDUPS = importlib.import_module("interop._speedups")
    WHY = "compiled (interop._speedups)"
except ImportError as exc:
    SPEEDUPS = None
    WHY = f"pure Python ({exc})"
