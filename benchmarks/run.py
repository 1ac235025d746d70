"""Run the benchmark suite: `python -m benchmarks [--quick] [--json] [--out DIR] [--latest]`.

Also runnable as `python benchmarks/run.py ...` from the repository root.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"

from benchmarks import env  # first: sets the TF/JAX environment before any framework

SECTIONS = ("overhead", "copies", "cold", "breakdown")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="interop-hub's cost against direct framework calls: zero-copy overhead per "
        "pair, size scaling, forced-copy throughput, explain, cold first calls.",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="short run for development: 2 sizes, fewer rounds, 2 cold pairs",
    )
    p.add_argument("--json", action="store_true", help="also write results.json")
    p.add_argument(
        "--out",
        type=Path,
        default=env.ROOT / "benchmarks" / "results",
        help="folder for results.md, results.json and overhead.png "
        "(default: benchmarks/results, git-ignored)",
    )
    p.add_argument(
        "--latest", action="store_true", help="also copy the Markdown table to benchmarks/LATEST.md"
    )
    p.add_argument("--frameworks", help="comma-separated adapter names (default: all usable)")
    p.add_argument("--only", help=f"comma-separated sections to run, of {', '.join(SECTIONS)}")
    p.add_argument("--sizes", help="comma-separated element counts for the scaling runs")
    p.add_argument("--rounds", type=int, help="rounds per measurement")
    p.add_argument(
        "--cold-pairs",
        choices=("all", "numpy", "some"),
        help="pairs measured cold: all, those with NumPy on one side (full default), or "
        "NumPy <-> torch (quick default)",
    )
    p.add_argument("--no-chart", action="store_true", help="skip the PNG")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from . import report, suites

    settings = suites.QUICK if args.quick else suites.FULL
    if args.sizes:
        settings = replace(settings, sizes=tuple(int(float(v)) for v in args.sizes.split(",")))
    if args.rounds:
        settings = replace(settings, rounds=args.rounds)
    if args.cold_pairs:
        settings = replace(settings, cold_pairs=args.cold_pairs)
    sections = set(args.only.split(",")) if args.only else set(SECTIONS)
    unknown = sections - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    started = time.perf_counter()
    command = "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:])
    only = args.frameworks.split(",") if args.frameworks else None
    frameworks, skipped = suites.discover(only)
    machine = env.machine()
    log(
        f"interop benchmarks ({'quick' if settings.quick else 'full'}): "
        f"{', '.join(f.name for f in frameworks)}"
        + (f"; not measured: {', '.join(skipped)}" if skipped else "")
    )

    data = {
        "command": command.strip(),
        "machine": machine,
        "settings": {k: v for k, v in vars(settings).items()},
        "frameworks": [
            {
                "name": f.name,
                "module": f.module,
                "version": f.adapter.framework_version(),
                "note": f.note,
            }
            for f in frameworks
        ],
        "skipped_frameworks": skipped,
        "overhead_results": [],
        "copy_results": [],
        "cold": [],
        "breakdown": [],
    }
    if "overhead" in sections:
        log("zero-copy overhead and size scaling:")
        data["overhead_results"] = suites.overhead(frameworks, settings, log)
    if "copies" in sections:
        log("forced copies:")
        best = {(r.src, r.dst): r.best for r in data["overhead_results"] if r.best}
        data["copy_results"] = suites.copies(frameworks, settings, best, log)
    if "breakdown" in sections:
        log("hot-path breakdown:")
        data["breakdown"] = suites.breakdown(frameworks, settings, log)
    if "cold" in sections:
        log("cold first calls (fresh processes):")
        data["cold"] = suites.cold(frameworks, settings, log)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    data["load_average_end"] = [round(v, 2) for v in load] if load else None
    data["duration_s"] = round(time.perf_counter() - started, 1)

    text = report.markdown(data)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text)
    written = [args.out / "results.md"]
    if args.json:
        (args.out / "results.json").write_text(report.to_json(data))
        written.append(args.out / "results.json")
    if not args.no_chart:
        problem = report.chart(data, args.out / "overhead.png")
        if problem:
            log(f"no chart: {problem}")
        else:
            written.append(args.out / "overhead.png")
    if args.latest:
        latest = env.ROOT / "benchmarks" / "LATEST.md"
        latest.write_text(text)
        written.append(latest)
    log(f"done in {data['duration_s']} s; wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
