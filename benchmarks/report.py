"""Tables (terminal and Markdown), JSON and the overhead chart, and the targets verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .suites import NON_COMPACT, CopyResult, PairResult

#: goals the issue sets, reported against (not asserted)
OVERHEAD_US = 0.3
FLAT_RATIO = 1.1
COPY_FRACTION = 0.8


def _us(ns: float | None, digits: int = 2) -> str:
    return "-" if ns is None else f"{ns / 1e3:.{digits}f}"


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.1f}"


def _mark(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "**no**")


def _size(n: int) -> str:
    exp = len(str(n)) - 1
    return f"1e{exp}" if n == 10**exp else str(n)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


# --- verdicts ----------------------------------------------------------------------------------


def overhead_rows(results: list[PairResult]) -> list[dict[str, Any]]:
    """One row per measured pair at the smallest size, with the verdicts."""
    rows = []
    for r in results:
        if r.skipped or not r.sizes:
            continue
        first = r.sizes[min(r.sizes)]
        if "library_ns" not in first:
            continue
        lib, best, obj = first["library_ns"], first.get("best_ns"), first.get("object_ns")
        row = {
            "pair": f"{r.src} → {r.dst}",
            "library_ns": lib,
            "best_ns": best,
            "best": r.best,
            "object_ns": obj,
            "object": r.obj,
            "native_ns": first.get("native_ns"),
            "native": r.native,
            "explain_ns": first.get("explain_ns"),
            "ratio": first.get("ratio_vs_best"),
            "diff_ns": first.get("diff_vs_best_ns"),
            "overhead_ok": first["diff_vs_best_ns"] <= OVERHEAD_US * 1e3
            if best is not None
            else None,
            # where a cheaper protocol than from_dlpack(obj) exists, be no slower than obj
            "cheaper_than_object": obj is not None and best is not None and best < obj,
            "diff_vs_object_ns": first.get("diff_vs_object_ns"),
            "object_ok": first["diff_vs_object_ns"] <= 0
            if obj is not None and best is not None and best < obj
            else None,
        }
        rows.append(row)
    return rows


def scaling_rows(results: list[PairResult]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        timed = {n: v for n, v in sorted(r.sizes.items()) if "library_ns" in v}
        if len(timed) < 2:
            continue
        small, large = min(timed), max(timed)
        for key, what in (("library_ns", "library"), ("best_ns", r.best)):
            if key not in timed[small] or key not in timed[large]:
                continue
            ratio = timed[large].get(f"{key[:-3]}_ratio_vs_smallest")
            rows.append(
                {
                    "pair": f"{r.src} → {r.dst}",
                    "route": what,
                    "times": {n: v.get(key) for n, v in r.sizes.items()},
                    "largest": large,
                    "ratio": ratio,
                    "flat": ratio is not None and ratio <= FLAT_RATIO,
                }
            )
    return rows


def copy_rows(results: list[CopyResult]) -> list[dict[str, Any]]:
    rows = []
    for c in results:
        lib, fresh, pre = c.gbps("library"), c.gbps("copyto_fresh"), c.gbps("copyto_prealloc")
        rows.append(
            {
                "case": c.case,
                "pair": f"{c.src} → {c.dst}",
                "mb": c.nbytes / 1e6,
                "library": lib,
                "direct": c.gbps("direct"),
                "fresh": fresh,
                "prealloc": pre,
                "of_fresh": lib / fresh if lib and fresh else None,
                "of_prealloc": lib / pre if lib and pre else None,
                "ok": lib / fresh >= COPY_FRACTION if lib and fresh else None,
                "error": c.error,
                "plan": c.plan,
                "direct_route": c.direct,
            }
        )
    return rows


def targets(data: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    """(target, met, measured, misses) for each goal."""
    over = overhead_rows(data["overhead_results"])
    scal = [r for r in scaling_rows(data["overhead_results"]) if r["route"] == "library"]
    cops = copy_rows(data["copy_results"])

    def count(rows: list[dict[str, Any]], key: str, name: str = "pair") -> tuple[int, int, str]:
        judged = [r for r in rows if r[key] is not None]
        misses = [r[name] for r in judged if not r[key]]
        shown = ", ".join(misses[:6]) + (f" (+{len(misses) - 6})" if len(misses) > 6 else "")
        return sum(1 for r in judged if r[key]), len(judged), shown

    return [
        (
            f"overhead ≤ {OVERHEAD_US} µs over the fastest direct DLPack route (1e3 float32)",
            *count(over, "overhead_ok"),
        ),
        (
            "no slower than the target's own from_dlpack(tensor) where a cheaper protocol exists",
            *count(over, "object_ok"),
        ),
        (
            f"zero-copy time flat in size: library t(largest)/t(1e3) ≤ {FLAT_RATIO}",
            *count(scal, "flat"),
        ),
        (
            f"forced copies ≥ {COPY_FRACTION:.0%} of numpy.copyto bandwidth (fresh destination)",
            *count(
                [dict(r, pair=f"{r['case']}: {r['pair']} ({r['mb']:g} MB)") for r in cops], "ok"
            ),
        ),
    ]


# --- Markdown ----------------------------------------------------------------------------------


def markdown(data: dict[str, Any]) -> str:
    m = data["machine"]
    s = data["settings"]
    lines = [
        "# interop-hub benchmarks",
        "",
        f"Command: `{data['command']}` — {m['date']}.",
        "",
        f"Machine: {m['cpu']}, {m['cpus']} CPUs ({m.get('affinity')} usable), "
        f"{m.get('memory_gib')} GiB, {m['platform']}; load average at start "
        f"{m.get('load_average')}, at end {data.get('load_average_end')}"
        + (
            "; intra-op threads: " + ", ".join(f"{k} {v}" for k, v in m["intra_op_threads"].items())
            if m.get("intra_op_threads")
            else ""
        )
        + f"; suite ran {data.get('duration_s')} s.",
        "",
        f"Versions: Python {m['python']}, interop {m['interop']} (git {m.get('git')}), "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
        + ".",
        "",
        "Frameworks measured: "
        + (", ".join(f["name"] for f in data["frameworks"]) or "none")
        + "."
        + (
            " Not measured: "
            + "; ".join(f"{k} ({v})" for k, v in data["skipped_frameworks"].items())
            + "."
            if data["skipped_frameworks"]
            else ""
        ),
        "",
        f"Method: library and direct calls alternate in batches of ~{s['batch_ns'] / 1e3:g} µs "
        f"within each of {s['rounds']} rounds (order rotated every round), same process; "
        "medians of per-call times; ratios and differences are medians of the per-round pairs "
        "(both batches of a round run next to each other), so load drifts cancel. "
        "`time.perf_counter_ns`, GC off during measurements; the empty loop's cost is "
        "subtracted. Every call makes a fresh capsule on both sides; JAX results "
        "are waited on (`block_until_ready`). Every route is checked to share memory before it "
        "is timed. NumPy sources are 64-byte aligned (JAX copies unaligned buffers).",
        "",
        "## Targets",
        "",
    ]
    rows = [[t, f"{met}/{n}", misses or "-"] for t, met, n, misses in targets(data)]
    lines += _table(["target", "met", "missed by"], rows)

    over = overhead_rows(data["overhead_results"])
    small = _size(min(s["sizes"]))
    lines += [
        "",
        f"## Overhead per zero-copy conversion (float32, {small} elements, contiguous)",
        "",
    ]
    rows = [
        [
            r["pair"],
            _us(r["library_ns"]),
            _us(r["best_ns"]),
            f"`{r['best']}`" if r["best"] else "-",
            f"{r['ratio']:.1f}x" if r["ratio"] else "-",
            _us(r["diff_ns"]) if r["diff_ns"] is not None else "-",
            _mark(r["overhead_ok"]),
            _us(r["object_ns"]),
            f"{_mark(r['object_ok'])} ({r['diff_vs_object_ns'] / 1e3:+.2f})"
            if r["cheaper_than_object"]
            else "n/a",
            _us(r["native_ns"]),
            _us(r["explain_ns"]),
        ]
        for r in over
    ]
    lines += _table(
        [
            "pair",
            "library µs",
            "fastest direct µs",
            "fastest direct route",
            "ratio",
            "difference µs",
            f"≤ {OVERHEAD_US} µs",
            "from_dlpack(tensor) µs",
            "library ≤ from_dlpack(tensor)",
            "native non-DLPack µs",
            "explain µs",
        ],
        rows,
    )
    skipped = [r for r in data["overhead_results"] if r.skipped]
    if skipped:
        lines += ["", "Pairs not measured for overhead:", ""]
        lines += [f"- {r.src} → {r.dst}: {r.skipped}" for r in skipped]

    lines += ["", "### Every direct route tried", ""]
    rows = []
    for r in data["overhead_results"]:
        for route in r.routes:
            shares = route.get("shares")
            rows.append(
                [
                    f"{r.src} → {r.dst}",
                    f"`{route['label']}`",
                    route["kind"],
                    _us(route.get("median_ns")) if "median_ns" in route else "-",
                    route.get("error")
                    or (
                        "shares memory"
                        if shares
                        else "copies (excluded)"
                        if shares is False
                        else "unchecked"
                    ),
                ]
            )
    lines += _table(["pair", "route", "kind", "µs", "result"], rows)

    scal = scaling_rows(data["overhead_results"])
    sizes = s["sizes"]
    lines += ["", "## Size scaling of zero-copy conversions (µs per call)", ""]
    rows = [
        [
            r["pair"],
            f"`{r['route']}`" if r["route"] != "library" else "library",
            *[_us(r["times"].get(n)) for n in sizes],
            f"{r['ratio']:.2f}" if r["ratio"] else "-",
            _mark(r["flat"]),
        ]
        for r in scal
    ]
    lines += _table(
        [
            "pair",
            "route",
            *[_size(n) for n in sizes],
            "largest / smallest",
            f"flat (≤ {FLAT_RATIO})",
        ],
        rows,
    )
    notes = sorted(
        {
            f"{r.src} → {r.dst} at {_size(n)}: {v['skipped']}"
            for r in data["overhead_results"]
            for n, v in r.sizes.items()
            if "skipped" in v
        }
    )
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]

    cops = copy_rows(data["copy_results"])
    lines += [
        "",
        "## Forced copies (float32; GB/s of result bytes, medians)",
        "",
    ]
    rows = [
        [
            r["case"],
            r["pair"],
            f"{r['mb']:g}",
            *(
                f"{v:.2f}" if v else "-"
                for v in (r["library"], r["direct"], r["fresh"], r["prealloc"])
            ),
            f"{r['of_fresh']:.0%}" if r["of_fresh"] else "-",
            f"{r['of_prealloc']:.0%}" if r["of_prealloc"] else "-",
            _mark(r["ok"]),
            r["error"] or r["plan"],
        ]
        for r in cops
    ]
    lines += _table(
        [
            "case",
            "pair",
            "MB",
            "library",
            "direct (copy, then share)",
            "np.copyto, fresh dst",
            "np.copyto, preallocated dst",
            "library / copyto fresh",
            "library / copyto prealloc",
            f"≥ {COPY_FRACTION:.0%}",
            "plan or error",
        ],
        rows,
    )
    lines += [
        "",
        "`np.copyto, fresh dst` is `np.copyto(np.empty(shape), src)` (allocation and first-touch "
        "page faults included, as any copy returning new memory pays them); `preallocated` "
        "reuses one destination (the memory-bandwidth ceiling). "
        f"Non-compact sources ({NON_COMPACT}) are step-sliced `[::2]` views, and so is the "
        "NumPy reference. The direct route is the source framework's own compact copy handed "
        "to the pair's fastest zero-copy route.",
    ]

    lines += ["", "## explain, and cold first calls (fresh process each)", ""]
    cold = data["cold"]
    rows = []
    for c in [c for c in cold if c["mode"] == "convert"]:
        e = next(
            (
                k
                for k in cold
                if k["mode"] == "explain" and k["src"] == c["src"] and k["dst"] == c["dst"]
            ),
            {},
        )
        rows.append(
            [
                f"{c['src']} → {c['dst']}",
                _ms(c.get("import_frameworks_ns")),
                _ms(c.get("first_direct_ns")),
                _ms(c.get("import_interop_ns"))
                if c.get("import_interop_ns") is not None
                else "(by the shim)",
                _ms(c.get("first_convert_ns")),
                _us(c.get("second_convert_ns")),
                _us(c.get("warm_convert_ns")),
                _ms(e.get("first_explain_ns")),
                _us(e.get("first_convert_after_explain_ns")),
                _us(e.get("warm_explain_ns")),
                c.get("error") or e.get("error") or "",
            ]
        )
    lines += _table(
        [
            "pair",
            "import frameworks ms",
            "first direct call ms",
            "import interop ms",
            "first convert ms",
            "second convert µs",
            "warm convert µs",
            "first explain ms",
            "first convert after explain µs",
            "warm explain µs",
            "error",
        ],
        rows,
    )
    lines += [
        "",
        "Each row is one fresh process per mode: the frameworks are imported, one direct "
        "conversion runs (the frameworks' own lazy initialisation, timed apart), then `import "
        "interop` and the library's first call. MXNet's shim (`interop_mxnet`) imports "
        "interop itself, so for MXNet pairs its import is inside the framework import. "
        + (
            f"NumPy ↔ torch rows are medians of {s['cold_repeats']} processes, the others "
            "single processes."
            if s["cold_repeats"] > 1
            else "Single processes: expect noise of several ms."
        ),
    ]
    stages = [c for c in cold if c["mode"] == "stages" and "error" not in c]
    if stages:
        keys = [
            "discover_entry_points_ns",
            "load_target_adapter_ns",
            "detect_source_adapter_ns",
            "build_plan_ns",
            "first_convert_ns",
            "warm_convert_ns",
        ]
        lines += ["", "First call split into stages (µs):", ""]
        lines += _table(
            [
                "pair",
                "entry points",
                "target adapter",
                "source adapter",
                "explain (plan)",
                "convert (plan cached)",
                "warm convert",
            ],
            [[f"{c['src']} → {c['dst']}", *(_us(c.get(k), 1) for k in keys)] for c in stages],
        )

    for b in data["breakdown"]:
        if "error" in b:
            lines += ["", f"Hot-path breakdown {b['src']} → {b['dst']}: {b['error']}"]
    good = [b for b in data["breakdown"] if "steps" in b]
    if good:
        lines += [
            "",
            f"## Where a warm convert's time goes ({small} float32; each step timed "
            "alone, interleaved)",
            "",
        ]
        head = ["step", *[f"{b['src']} → {b['dst']} µs" for b in good]]
        labels: list[str] = []
        for b in good:
            labels += [st["step"] for st in b["steps"] if st["step"] not in labels]
        rows = []
        for label in labels:
            cells = []
            for b in good:
                st = next((x for x in b["steps"] if x["step"] == label), None)
                cells.append("-" if st is None or "median_ns" not in st else _us(st["median_ns"]))
            rows.append([label, *cells])
        lines += _table(head, rows)
        lines += ["", "Steps overlap (each bigger step includes the smaller ones named in it)."]
    lines.append("")
    return "\n".join(lines)


# --- JSON and chart ----------------------------------------------------------------------------


def to_json(data: dict[str, Any]) -> str:
    out = {k: v for k, v in data.items() if not k.endswith("_results")}
    out["overhead"] = [r.json() for r in data["overhead_results"]]
    out["copies"] = [c.json() for c in data["copy_results"]]
    out["targets"] = [
        {"target": t, "met": met, "measured": n, "missed_by": misses}
        for t, met, n, misses in targets(data)
    ]
    out["summary"] = {
        "overhead": overhead_rows(data["overhead_results"]),
        "scaling": [
            dict(r, times={str(k): v for k, v in r["times"].items()})
            for r in scaling_rows(data["overhead_results"])
        ],
        "copies": copy_rows(data["copy_results"]),
    }
    return json.dumps(out, indent=1, default=str)


def chart(data: dict[str, Any], path: Path) -> str | None:
    """A PNG of library vs fastest direct time, and the difference, per pair."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        return "matplotlib is not installed (pip install -r benchmarks/requirements.txt)"
    rows = [r for r in overhead_rows(data["overhead_results"]) if r["best_ns"] is not None]
    if not rows:
        return "no pair with a direct route was measured"
    labels = [r["pair"] for r in rows]
    ys = range(len(rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.38 * len(rows) + 1.8), sharey=True)
    h = 0.4
    left.barh(
        [y - h / 2 for y in ys],
        [r["library_ns"] / 1e3 for r in rows],
        h,
        label="interop.convert",
        color="#c0504d",
    )
    left.barh(
        [y + h / 2 for y in ys],
        [r["best_ns"] / 1e3 for r in rows],
        h,
        label="fastest direct DLPack route",
        color="#4f81bd",
    )
    left.set_xscale("log")
    left.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    left.xaxis.set_minor_formatter(ticker.NullFormatter())
    left.set_xlabel("µs per call (median, log scale)")
    left.set_yticks(list(ys), labels)
    left.invert_yaxis()
    right.barh(list(ys), [r["diff_ns"] / 1e3 for r in rows], 0.6, color="#9bbb59")
    right.axvline(
        OVERHEAD_US, color="black", linestyle="--", linewidth=1, label=f"target {OVERHEAD_US} µs"
    )
    right.set_xlabel("library - direct, µs per call (median of per-round differences)")
    fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False)
    m = data["machine"]
    fig.suptitle(
        f"interop-hub overhead per zero-copy conversion (float32, 1e3) — {m['date']}, {m['cpu']}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.4 / (0.38 * len(rows) + 1.8), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
