"""`python -m benchmarks [--quick] [--json]`: the suite a maintainer reruns.

Also runnable as `python benchmarks/run.py ...` from the repository root.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"

from benchmarks import env  # first: sets the TF/JAX environment before any framework

SECTIONS = ("pairs", "copies", "first")


@dataclass(frozen=True)
class Settings:
    n: int  # elements of the zero-copy sources
    large_n: int | None  # size scaling: the compiled path at this size too (None: skip)
    rounds: int
    batch_ns: float
    copy_n: int  # elements of the forced copies (float32: 4 bytes each)
    copy_rounds: int
    copy_batch_ns: float
    first_pairs: str  # "all", or "some": NumPy <-> torch, jax -> torch, tensorflow -> numpy
    first_repeats: int
    quick: bool = False


FULL = Settings(
    n=1_000,
    large_n=10_000_000,
    rounds=101,
    batch_ns=200_000,
    copy_n=10_000_000,
    copy_rounds=21,
    copy_batch_ns=20_000_000,
    first_pairs="all",
    first_repeats=3,  # single processes vary by several ms, now and then by far more
)
QUICK = replace(
    FULL,
    large_n=None,
    rounds=21,
    batch_ns=100_000,
    copy_rounds=5,
    copy_batch_ns=1,  # one copy per batch
    first_pairs="some",
    first_repeats=1,
    quick=True,
)
SOME_FIRST = (("numpy", "torch"), ("torch", "numpy"), ("jax", "torch"), ("tensorflow", "numpy"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="interop-hub against the frameworks' direct calls: zero-copy conversions "
        "per pair (compiled and pure-Python paths), forced-copy bandwidth, the first call.",
    )
    p.add_argument(
        "--quick", action="store_true", help="fewer rounds, no size scaling, 4 first-call pairs"
    )
    p.add_argument("--json", action="store_true", help="also write results.json")
    p.add_argument(
        "--out",
        type=Path,
        default=env.ROOT / "benchmarks" / "results",
        help="folder for results.md and results.json (default: benchmarks/results, git-ignored)",
    )
    p.add_argument("--frameworks", help="comma-separated adapter names (default: every usable one)")
    p.add_argument("--only", help=f"comma-separated sections, of {', '.join(SECTIONS)}")
    p.add_argument("--rounds", type=int, help="rounds per zero-copy measurement")
    return p


def _first_pairs(frameworks: list[Any], which: str) -> list[tuple[str, str]]:
    names = [fw.name for fw in frameworks]
    every = [(s, d) for s in names for d in names if s != d]
    if which == "all":
        return every
    return [p for p in SOME_FIRST if p in every] or every[:2]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from . import copies, first, overhead, report
    from .installed import discover

    settings = QUICK if args.quick else FULL
    if args.rounds:
        settings = replace(settings, rounds=args.rounds)
    sections = set(args.only.split(",")) if args.only else set(SECTIONS)
    if sections - set(SECTIONS):
        raise SystemExit(f"unknown sections {sorted(sections - set(SECTIONS))}; known: {SECTIONS}")

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    started = time.perf_counter()
    frameworks, skipped = discover(args.frameworks.split(",") if args.frameworks else None)
    log(
        f"interop benchmarks ({'quick' if settings.quick else 'full'}): "
        + ", ".join(fw.name for fw in frameworks)
        + (f"; left out: {', '.join(skipped)}" if skipped else "")
    )
    data: dict[str, Any] = {
        "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": env.machine(),
        "settings": asdict(settings),
        "frameworks": frameworks,
        "skipped": skipped,
        "fast_path": overhead.interop_paths()[1],
        "pairs": [],
        "copies": [],
        "first": [],
    }
    if "pairs" in sections:
        log(f"zero-copy conversions, {settings.n} float32:")
        data["pairs"], data["fast_path"] = overhead.measure(
            frameworks,
            n=settings.n,
            rounds=settings.rounds,
            batch_ns=settings.batch_ns,
            large_n=settings.large_n,
            log=log,
        )
    if "copies" in sections:
        log(f"forced copies, {settings.copy_n * 4 / 1e6:g} MB:")
        data["copies"] = copies.measure(
            frameworks,
            n=settings.copy_n,
            rounds=settings.copy_rounds,
            batch_ns=settings.copy_batch_ns,
            log=log,
        )
    if "first" in sections:
        log("the first call, a fresh process per pair:")
        pairs = _first_pairs(frameworks, settings.first_pairs)
        data["first"] = first.measure(pairs, repeats=settings.first_repeats, log=log)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    data["load_average_end"] = [round(v, 2) for v in load] if load else None
    data["duration_s"] = round(time.perf_counter() - started, 1)

    text = report.markdown(data)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    written = [args.out / "results.md"]
    written[0].write_text(text)
    if args.json:
        written.append(args.out / "results.json")
        written[-1].write_text(report.to_json(data))
    log(f"done in {data['duration_s']} s; wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
