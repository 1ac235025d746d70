"""The conversion matrix: every ordered pair of usable frameworks × every dtype both hold.

Each cell converts a real tensor made by the source framework and reports what happened:
zero-copy (proven by data address), copied (and why), or unsupported (and why), with the
median time per call.

Whether memory can be shared may depend on where the sample lies (TensorFlow takes only
64-byte aligned buffers), and allocators place arrays 16 or 64 bytes apart by chance: each
cell is measured on a sample placed on purpose, 64-byte aligned and off 64 bytes, wherever the
source's allocator ever places one so, so that two runs give the same table (MLX's never
aligns: its rows are off 64 bytes only).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

from .adapter import Adapter
from .api import HUB, convert, explain
from .errors import InteropError, InvalidArgumentError

DTYPES = (
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "float16 bfloat16 float32 float64 complex64 complex128"
).split()
#: the short spellings the grid's header prints (f64, u8, c64, bf16), accepted back as input
SHORT = {d: d.replace("complex", "c").replace("float", "f").replace("uint", "u") for d in DTYPES}
_SPELLINGS = {**{d: d for d in DTYPES}, **{short: d for d, short in SHORT.items()}}
SHAPE = (64, 16)
ALIGNED, UNALIGNED = "aligned", "unaligned"
ALIGNMENT = 64
#: the alignment an off-64 sample is looked for at first (malloc's own guarantee), so that the
#: reasons that name it read the same from run to run
OFF_ALIGNMENT = 16
#: samples made while looking for one at a placement (allocators reuse a freed block at once,
#: so the ones passed over are held until the search ends)
TRIES = 32
#: why a cell has no sample: the source framework could not make one
UNMADE = "{source} cannot make it"


def dtype_name(text: str) -> str:
    """The dtype `text` spells (`float64` or `f64`); InvalidArgumentError if none."""
    found = _SPELLINGS.get(text.strip().lower())
    if found is None:
        known = " ".join(f"{d}/{SHORT[d]}" if SHORT[d] != d else d for d in DTYPES)
        raise InvalidArgumentError(f"unknown dtype {text!r}; known: {known}")
    return found


def framework_name(text: str) -> str:
    """The usable adapter `text` names, by name or alias as `convert(x, text)` takes it
    (`pytorch` is `torch`); InvalidArgumentError if none is usable here."""
    names = [a.name for a in usable()]
    try:
        name = HUB.registry.get(text).name
    except InteropError:
        name = ""
    if name not in names:
        raise InvalidArgumentError(
            f"unknown or unusable framework {text!r} (usable here: {', '.join(names) or 'none'})"
        )
    return name


@dataclass(frozen=True)
class Cell:
    source: str
    target: str
    dtype: str
    outcome: str  # "zero-copy", "copied", "unsupported", "failed"
    why: str
    median_us: float | None
    placement: str = ALIGNED  # the sample's data address: 64-byte aligned or not


def usable() -> list[Adapter]:
    loaded = HUB.registry.loaded()
    return sorted((a for a in loaded if a.unavailable() is None), key=lambda a: a.name)


def placed(src: Adapter, dtype: str, placement: str) -> Any | None:
    """A sample of `src` whose data address is 64-byte aligned (ALIGNED) or not (UNALIGNED:
    exactly `OFF_ALIGNMENT`-byte aligned where one of `TRIES` samples is, else the first off
    64 bytes), or None when `TRIES` samples never were."""
    passed_over = []
    for _ in range(TRIES):
        x = src.sample(dtype, SHAPE)
        address = src.data_address(x)
        if placement == ALIGNED and address % ALIGNMENT == 0:
            return x
        if placement == UNALIGNED and address % (2 * OFF_ALIGNMENT) == OFF_ALIGNMENT:
            return x
        passed_over.append(x)
    if placement == UNALIGNED:
        return next((x for x in passed_over if src.data_address(x) % ALIGNMENT), None)
    return None


def _time(src: Adapter, dst: Adapter, x: Any, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        convert(x, dst.name)
        samples.append(time.perf_counter_ns() - start)
    return median(samples) / 1000


def cell(
    src: Adapter, dst: Adapter, dtype: str, repeats: int = 25, placement: str = ALIGNED
) -> Cell | None:
    """Convert one real tensor at `placement` and report the outcome, checked by address
    where shared; None where the source's allocator never places a sample so."""
    try:
        x = placed(src, dtype, placement)
    except Exception as exc:  # said once, on the aligned row
        if placement != ALIGNED:
            return None
        return Cell(
            src.name,
            dst.name,
            dtype,
            "unsupported",
            f"{UNMADE.format(source=src.name)}: {type(exc).__name__}",
            None,
            placement,
        )
    if x is None:  # MLX's allocator, for one, never places an array 64-byte aligned
        return None
    try:
        plan = explain(x, dst.name)
        y = convert(x, dst.name)
    except InteropError as exc:
        return Cell(src.name, dst.name, dtype, "unsupported", str(exc), None, placement)
    except Exception as exc:  # a framework failed where the plan said it would work
        why = f"{type(exc).__name__}: {exc}"
        return Cell(src.name, dst.name, dtype, "failed", why, None, placement)
    if dst.to_bytes(y) != src.to_bytes(x):
        return Cell(src.name, dst.name, dtype, "failed", "values differ", None, placement)
    shared = dst.data_address(y) == src.data_address(x)
    if shared != plan.zero_copy:
        return Cell(
            src.name,
            dst.name,
            dtype,
            "failed",
            f"plan said zero_copy={plan.zero_copy} but memory shared={shared}",
            None,
            placement,
        )
    why = "; ".join((*plan.reasons, *plan.decided_notes))  # the plan's, not the warm route's
    outcome = "zero-copy" if shared else "copied"
    return Cell(src.name, dst.name, dtype, outcome, why, _time(src, dst, x, repeats), placement)


def run(
    frameworks: list[str] | None = None, dtypes: list[str] | None = None, repeats: int = 25
) -> list[Cell]:
    """Every cell between `frameworks` (names or aliases; default all usable) in `dtypes`
    (names or the grid's short spellings; default all). Each is named once."""
    wanted = {framework_name(f) for f in frameworks or ()}
    adapters = [a for a in usable() if not wanted or a.name in wanted]
    dtypes = list(dict.fromkeys(dtype_name(d) for d in dtypes)) if dtypes else None
    cells = (
        cell(s, d, dtype, repeats, placement)
        for s in adapters
        for d in adapters
        if s is not d
        for placement in (ALIGNED, UNALIGNED)
        for dtype in (dtypes or DTYPES)
    )
    return [c for c in cells if c is not None]


def as_dicts(cells: list[Cell]) -> list[dict[str, object]]:
    return [asdict(c) for c in cells]


_MARK = {"zero-copy": "Z", "copied": "C", "unsupported": "-", "failed": "!"}


def render(cells: list[Cell]) -> str:
    """A grid (pairs × dtypes) then the reasons behind every copy, refusal and failure."""
    dtypes = list(dict.fromkeys(c.dtype for c in cells))
    rows = list(dict.fromkeys((c.source, c.target, c.placement) for c in cells))
    by_key = {(c.source, c.target, c.placement, c.dtype): c for c in cells}
    short = [SHORT.get(d, d) for d in dtypes]
    labels = {r: f"{r[0]} -> {r[1]}" + (" (off 64 B)" if r[2] == UNALIGNED else "") for r in rows}
    width = max((len(label) for label in labels.values()), default=10)
    lines = [
        "Z zero-copy (shared memory, checked by address)   C copied   - unsupported   ! failed",
        "cells: median microseconds per convert() call, on a 64-byte aligned sample; rows",
        "marked (off 64 B) on a sample that is not, for sources whose allocator places some so",
        "",
        " " * width + " | " + " ".join(f"{d:>9}" for d in short),
    ]
    for r in rows:
        row = []
        for d in dtypes:
            c = by_key.get((*r, d))
            time_us = f"{c.median_us:.1f}" if c and c.median_us is not None else ""
            row.append(f"{_MARK[c.outcome] if c else ' '} {time_us:>7}")
        lines.append(f"{labels[r]:<{width}} | " + " ".join(row))
    placements: dict[str, set[str]] = {}
    for c in cells:  # (a sample the source cannot make was never placed anywhere)
        made = not c.why.startswith(UNMADE.format(source=c.source))
        placements.setdefault(c.source, set()).update({c.placement} if made else set())
    never_aligned = sorted(s for s, p in placements.items() if ALIGNED not in p)
    if never_aligned:
        lines += [
            "",
            f"never placed 64-byte aligned (rows off 64 B only): {', '.join(never_aligned)}",
        ]
    explained = [c for c in cells if c.outcome != "zero-copy" or c.why]
    if explained:
        lines += ["", "Why:"]
        reasons: dict[str, list[str]] = {}
        for c in explained:
            where = " (off 64 B)" if c.placement == UNALIGNED else ""
            reasons.setdefault(
                f"[{_MARK[c.outcome]}] {c.source} -> {c.target}{where}: {c.why}", []
            ).append(c.dtype)
        for text, ds in reasons.items():
            lines.append(f"  {text}  ({', '.join(ds)})")
    counts = {k: sum(c.outcome == k for c in cells) for k in _MARK}
    lines += ["", "totals: " + ", ".join(f"{k} {v}" for k, v in counts.items())]
    return "\n".join(lines)
