"""The run's results as Markdown (printed to the terminal as well: its tables are padded to
line up) and JSON, with the verdicts against the targets."""

from __future__ import annotations

import json
from typing import Any

from .copies import FRACTION, CopyResult
from .frameworks import NATIVE
from .overhead import (
    COMPILED,
    COMPILED_RATIO,
    COMPILED_US,
    EXTEND_UP_TO,
    FLAT_RATIO,
    PURE,
    PURE_US,
    SLOW_DIRECT_US,
    TAKEN,
    PairResult,
    PathResult,
)

#: a load average per usable CPU above which the figures are flagged as noisy
BUSY = 0.5

PAIR_COLUMNS = [
    "pair",
    "direct µs",
    "fastest direct call",
    "compiled µs",
    "compiled +µs",
    "compiled ×",
    "compiled target",
    "direct µs (pure run)",
    "pure µs",
    "pure +µs",
    "pure ×",
    "pure target",
    "fast path",
    "non-DLPack µs",
    "large / small",
]
COPY_COLUMNS = [
    "source",
    "case",
    "into",
    "MB",
    "library GB/s",
    "np.copyto GB/s",
    "library / np.copyto",
    f"≥ {FRACTION:.0%}",
    "own copy GB/s",
    "where the plan copies",
]
FIRST_COLUMNS = [
    "pair",
    "import frameworks ms",
    "first direct call ms",
    "import interop ms",
    "first convert ms",
    "second convert µs",
    "plan building µs",
    "warm µs",
    "first / warm",
]


def _us(ns: float | None, signed: bool = False) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e3:+.2f}" if signed else f"{ns / 1e3:.2f}"


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.1f}"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}"


def _mark(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "**no**")


def _size(n: int) -> str:
    exp = len(str(n)) - 1
    return f"1e{exp}" if n == 10**exp else str(n)


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table whose columns line up in a terminal too."""
    cells = [head, *[[str(c).replace("|", "\\|") for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    return [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [
        line(row) for row in cells[1:]
    ]


# --- rows and verdicts -------------------------------------------------------------------------


def _path_cells(r: PairResult, path: str) -> list[str]:
    o = r.paths.get(path)
    if o is None:
        return ["not built", "-", "-", "-"]
    if o.error:
        return ["**fails**", "-", "-", f"**no**: {o.error}"]
    return [_us(o.ns), _diff_cell(o), _times(o.ratio), _mark(o.ok)]


def _diff_cell(o: PathResult) -> str:
    """The paired difference, with its 95 % interval where it has one."""
    if o.diff_interval_ns is None:
        return _us(o.diff_ns, signed=True)
    low, high = o.diff_interval_ns
    return f"{_us(o.diff_ns, signed=True)} [{_us(low, signed=True)}, {_us(high, signed=True)}]"


def _pure_direct_cell(r: PairResult) -> str:
    """The direct call the pure path is paired with, timed in its own process."""
    if r.pure_best_ns is None:
        return "-" if r.pure_best is None else "none shares memory"
    return _us(r.pure_best_ns) + ("" if r.pure_best == r.best else f" `{r.pure_best}`")


def _fast_path_cell(r: PairResult) -> str:
    notes = {p: o.fast_path for p, o in r.paths.items() if o.fast_path}
    if not notes:
        return "-"
    if all(v == TAKEN for v in notes.values()):
        return "yes"
    if len(set(notes.values())) == 1:
        return "**no: " + next(iter(notes.values())) + "**"
    return "; ".join(f"{p}: yes" if v == TAKEN else f"**{p}: no: {v}**" for p, v in notes.items())


def pair_rows(pairs: list[PairResult]) -> list[list[str]]:
    rows = []
    for r in pairs:
        if r.error:
            continue
        rows.append(
            [
                r.pair,
                _us(r.best_ns),
                f"`{r.best}`" if r.best else "none shares memory",
                *_path_cells(r, COMPILED),
                _pure_direct_cell(r),
                *_path_cells(r, PURE),
                _fast_path_cell(r),
                f"{_us(r.native_ns)} `{r.native}`" if r.native else "-",
                _times(r.large_ratio),
            ]
        )
    return rows


def copy_rows(copies: list[CopyResult]) -> list[list[str]]:
    return [
        [
            c.src,
            c.case,
            c.dst,
            f"{c.nbytes / 1e6:g}",
            f"{c.gbps:.2f}" if c.gbps else "-",
            f"{c.reference_gbps:.2f}" if c.reference_gbps else "-",
            f"{c.fraction:.0%}" if c.fraction else "-",
            _mark(c.ok),
            f"{c.own_gbps:.2f}" if c.own_gbps else "-",
            c.skipped or c.error or c.copy_step,
        ]
        for c in copies
    ]


def first_rows(first: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for f in first:
        if "error" in f:
            rows.append([f"{f['src']} → {f['dst']}", f["error"], *["-"] * 7])
            continue
        warm = f.get("warm_ns")
        rows.append(
            [
                f"{f['src']} → {f['dst']}",
                _ms(f.get("import_frameworks_ns")),
                _ms(f.get("first_direct_ns")),
                _ms(f.get("import_interop_ns"))
                if f.get("import_interop_ns") is not None
                else "(by the shim)",
                _ms(f.get("first_convert_ns")),
                _us(f.get("second_convert_ns")),
                _us(f.get("plan_ns")),
                _us(warm),
                f"{f['first_convert_ns'] / warm:,.0f}" if warm else "-",
            ]
        )
    return rows


def targets(data: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    """(target, met, judged, what misses it) for each target."""
    pairs = [r for r in data["pairs"] if not r.error]

    def verdict(items: list[tuple[str, bool | None]]) -> tuple[int, int, str]:
        judged = [(name, ok) for name, ok in items if ok is not None]
        misses = [name for name, ok in judged if not ok]
        shown = ", ".join(misses[:8]) + (f" (+{len(misses) - 8})" if len(misses) > 8 else "")
        return len(judged) - len(misses), len(judged), shown

    out = []
    for path, goal in (
        (
            COMPILED,
            f"compiled ≤ +{COMPILED_US} µs over the fastest direct call (or ≤ "
            f"{COMPILED_RATIO}× where it costs over {SLOW_DIRECT_US} µs)",
        ),
        (PURE, f"pure Python ≤ +{PURE_US} µs over the fastest direct call"),
    ):
        measured = [r for r in pairs if path in r.paths]
        if measured:
            out.append((goal, *verdict([(r.pair, r.paths[path].ok) for r in measured])))
    out.append(
        (
            "warm calls take the fast path (every path)",
            *verdict(
                [
                    (r.pair, all(o.fast_path == TAKEN for o in r.paths.values()))
                    for r in pairs
                    if any(o.fast_path for o in r.paths.values())
                ]
            ),
        )
    )
    scaled = [(r.pair, r.large_ratio <= FLAT_RATIO) for r in pairs if r.large_ratio is not None]
    if scaled:
        out.append(
            (f"zero-copy time flat in size (large / small ≤ {FLAT_RATIO})", *verdict(scaled))
        )
    if data["copies"]:
        out.append(
            (
                f"forced copies ≥ {FRACTION:.0%} of np.copyto into fresh memory",
                *verdict([(f"{c.src} {c.case}", c.ok) for c in data["copies"]]),
            )
        )
    return out


# --- Markdown ----------------------------------------------------------------------------------


def _header(data: dict[str, Any]) -> list[str]:
    m = data["machine"]
    s = data["settings"]
    load = m.get("load_average") or [0.0]
    cpus = m.get("affinity") or m.get("cpus") or 1
    lines = [
        "# interop-hub benchmarks",
        "",
        f"`{data['command']}` — {m['date']}, {data.get('duration_s')} s.",
        "",
        f"Machine: {m['cpu']}, {m['cpus']} CPUs ({m.get('affinity')} usable), "
        f"{m.get('memory_gib')} GiB, {m['platform']}, host {m['host']}. Load average at the "
        f"start {m.get('load_average')}, at the end {data.get('load_average_end')}.",
        "",
        f"Versions: Python {m['python']}, interop {m['interop']} (git {m.get('git')}), "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
        + f". `interop.convert`'s fast path: {data['fast_path']}.",
        "",
        "Frameworks: "
        + (", ".join(f.name for f in data["frameworks"]) or "none")
        + "."
        + (
            " Left out: " + "; ".join(f"{k} ({v})" for k, v in data["skipped"].items()) + "."
            if data["skipped"]
            else ""
        ),
        "",
    ]
    if load[0] > BUSY * cpus:
        lines += [
            f"**The machine was busy (load {load[0]:.1f} on {cpus} CPUs): expect noise.**",
            "",
        ]
    lines += [
        f"Method: the statements of a measurement alternate in batches of ~{s['batch_ns'] / 1e3:g}"
        f" µs, in an order rotated every round, {s['rounds']} rounds, one process. Times are "
        "medians of per-call batch times, less the empty loop's; differences (+µs) and ratios "
        "(×) are medians of the per-round pairs, so drifts in load hit both sides alike. GC off "
        "while timing; JAX results are waited on. See benchmarks/README.md.",
        "",
    ]
    return lines


def markdown(data: dict[str, Any]) -> str:
    s = data["settings"]
    lines = _header(data)
    lines += ["## Targets", ""]
    rows = [[goal, f"{met}/{judged}", misses or "-"] for goal, met, judged, misses in targets(data)]
    lines += table(["target", "met", "missed by"], rows)

    if data["pairs"]:
        lines += [
            "",
            f"## Zero-copy conversions ({_size(s['n'])} float32, contiguous, 64-byte aligned)",
            "",
        ]
        lines += table(PAIR_COLUMNS, pair_rows(data["pairs"]))
        failed = [r for r in data["pairs"] if r.error]
        lines += [
            "",
            "Direct call: the fastest direct DLPack call of the pair (public APIs; every call "
            "makes a fresh capsule); +µs and × are against it, +µs with its 95 % interval "
            "(benchmarks/README.md, Method). compiled: `interop.convert` "
            "with the compiled fast path; pure: `interop.convert` in a second process with "
            "INTEROP_PURE_PYTHON=1 (no compiled code at all, as without a compiler), paired "
            "with the direct calls timed again there (direct µs (pure run); the call named "
            "where another was the fastest there). "
            "Targets: compiled ≤ +0.3 µs (or ≤ 1.2× where the direct call costs over 1.5 µs), "
            "pure ≤ +1 µs. Fast path: whether warm calls of a fresh hub skip the full path (if "
            "not: the plan is not a plain share, the route is never learned, or it is learned "
            "and declines every call). "
            "non-DLPack: the fastest zero-copy route that is not DLPack (`torch.from_numpy`, "
            "...), for information only."
            + (
                f" large / small: `interop.convert`'s path at {_size(s['large_n'])} elements "
                f"over {_size(s['n'])}, paired."
                if s.get("large_n")
                else ""
            ),
        ]
        extended = [
            f"- {r.pair}, {p}: {_us(o.diff_ns, signed=True)} µs over {o.rounds} rounds, "
            f"95 % interval {_us(o.diff_interval_ns[0], signed=True)} to "
            f"{_us(o.diff_interval_ns[1], signed=True)}"
            + ("" if o.decided else " (it still straddles the target)")
            for r in data["pairs"]
            for p, o in r.paths.items()
            if o.rounds and o.diff_interval_ns and o.rounds > s["rounds"]
        ]
        if extended:
            lines += [
                "",
                "Measured over more rounds, the 95 % interval of their difference having "
                "straddled the target (an engine-bound call varies by more than the target: "
                "rounds are added until the verdict is the same across the interval, up to "
                f"{EXTEND_UP_TO}× the run's):",
                "",
                *extended,
            ]
        if failed:
            lines += ["", "Pairs not measured:", ""]
            lines += [f"- {r.pair}: {r.error}" for r in failed]
        excluded = [
            f"- {r.pair}: `{route['label']}` ({route['kind']}): {route['excluded']}"
            for r in data["pairs"]
            for route in r.routes
            if route.get("excluded")
        ]
        if excluded:
            lines += ["", "Direct routes left out (they copy or fail):", "", *excluded]
        unfair = [
            f"- {r.pair}: `{route['label']}`: {_us(route['ns'])} µs"
            for r in data["pairs"]
            for route in r.routes
            if "ns" in route and route["kind"] != NATIVE and not route["reference"]
        ]
        if unfair:
            lines += [
                "",
                "Direct calls timed but not taken as the reference: they hand write access to "
                "memory exported for reading only (MXNet's `to_dlpack_for_read` waits for "
                "pending writes, not reads), where interop exports for writing:",
                "",
                *unfair,
            ]

    if data["copies"]:
        lines += ["", f"## Forced copies ({_size(s['copy_n'])} float32)", ""]
        lines += table(COPY_COLUMNS, copy_rows(data["copies"]))
        lines += [
            "",
            "GB/s of result bytes, medians. np.copyto: `np.copyto(np.empty(...), ref)`, `ref` "
            "the source's own memory seen by NumPy zero-copy (strides kept: the same bytes from "
            "the same pages), allocation and page faults included, as for any copy returning "
            "new memory; library / np.copyto is the "
            "median of per-round ratios. own copy: the source framework's own copy (`clone`, "
            "`copy`, `DeepCopy`), for information.",
        ]

    if data["first"]:
        lines += ["", "## The first call (a fresh process per pair)", ""]
        lines += table(FIRST_COLUMNS, first_rows(data["first"]))
        lines += [
            "",
            "After the frameworks' import and their own first conversion (both timed apart): "
            "`import interop`, the first `convert` (entry points, adapters, plan, conversion), "
            "the second one (a fresh tensor), plan building alone (the first call of a second "
            "hub over the loaded registry), and the warm call (median of 300). "
            + (
                f"Medians of {s['first_repeats']} processes."
                if s["first_repeats"] > 1
                else "One process each: expect a few ms of noise."
            ),
        ]
    lines.append("")
    return "\n".join(lines)


# --- JSON --------------------------------------------------------------------------------------


def to_json(data: dict[str, Any]) -> str:
    out = dict(data)
    out["frameworks"] = [
        {"name": f.name, "module": f.module, "version": f.adapter.framework_version()}
        for f in data["frameworks"]
    ]
    out["pairs"] = [r.json() for r in data["pairs"]]
    out["copies"] = [c.json() for c in data["copies"]]
    out["targets"] = [
        {"target": goal, "met": met, "judged": judged, "missed_by": misses}
        for goal, met, judged, misses in targets(data)
    ]
    return json.dumps(out, indent=1, default=str)
