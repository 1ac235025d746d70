"""Profile the warm `convert` hot path: `python -m benchmarks.profile [SRC DST] [--calls N]`.

Writes, under benchmarks/results/profile/ (git-ignored):

- `<src>-<dst>.lines.txt`: line_profiler over convert and every helper it calls (per line
  hits and time; the profiler inflates absolute times, the shares are what to read);
- `<src>-<dst>.pyinstrument.txt`: pyinstrument's call tree (sampling, low overhead);
- `<src>-<dst>.cprofile.txt`: cProfile, by own time (always available).

Needs `pip install -r benchmarks/requirements.txt` for the first two.
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import io
import pstats
import sys
from pathlib import Path
from typing import Any

from . import env


def _functions(src: str, dst: str) -> list[Any]:
    """convert and the functions on its path, as they exist in the core today."""
    import interop
    from interop import api, capsule, exchange, info, plan
    from interop.registry import REGISTRY

    found: list[Any] = []
    for module in (api, exchange, info, capsule, plan):
        for obj in vars(module).values():
            if inspect.isfunction(obj) and obj.__module__ == module.__name__:
                found.append(obj)
            elif inspect.isclass(obj) and obj.__module__ == module.__name__:
                for attr in vars(obj).values():
                    fn = getattr(attr, "__func__", attr)
                    if inspect.isfunction(fn) and not hasattr(fn, "__wrapped__"):
                        found.append(fn)
    found.append(type(REGISTRY).get)
    found.append(type(REGISTRY).detect)
    for name in (src, dst):
        adapter = REGISTRY.get(name)
        for attr in ("export", "from_dlpack", "capabilities", "owns", "tensor_types"):
            fn = getattr(type(adapter), attr, None)
            if inspect.isfunction(fn):
                found.append(fn)
    found.append(interop.convert)
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    p.add_argument("src", nargs="?", default="numpy")
    p.add_argument("dst", nargs="?", default="torch")
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--out", type=Path, default=env.ROOT / "benchmarks" / "results" / "profile")
    args = p.parse_args(argv)

    import interop

    from .suites import discover

    frameworks, _ = discover([args.src, args.dst])
    by_name = {f.name: f for f in frameworks}
    src, dst = by_name[args.src], by_name[args.dst]
    x = src.make(1000)
    wait = dst.spec is not None and dst.spec.wait != "{}"

    def loop(n: int) -> None:
        convert = interop.convert
        to = dst.name
        if wait:
            for _ in range(n):
                convert(x, to).block_until_ready()
        else:
            for _ in range(n):
                convert(x, to)

    loop(1000)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{src.name}-{dst.name}"
    written = []

    profiler = cProfile.Profile()
    profiler.enable()
    loop(args.calls)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
    Path(f"{stem}.cprofile.txt").write_text(text.getvalue())
    written.append(f"{stem}.cprofile.txt")

    try:
        from line_profiler import LineProfiler
    except ImportError:
        print("line_profiler is not installed: no per-line profile", file=sys.stderr)
    else:
        lines = LineProfiler()
        for fn in _functions(src.name, dst.name):
            lines.add_function(fn)
        lines.enable_by_count()
        loop(args.calls)
        lines.disable_by_count()
        text = io.StringIO()
        lines.print_stats(stream=text, output_unit=1e-6, stripzeros=True)
        Path(f"{stem}.lines.txt").write_text(text.getvalue())
        written.append(f"{stem}.lines.txt")

    try:
        from pyinstrument import Profiler
    except ImportError:
        print("pyinstrument is not installed: no call tree", file=sys.stderr)
    else:
        sampler = Profiler(interval=0.0001)
        sampler.start()
        loop(args.calls)
        sampler.stop()
        tree = sampler.output_text(unicode=False, color=False, show_all=False)
        Path(f"{stem}.pyinstrument.txt").write_text(tree)
        written.append(f"{stem}.pyinstrument.txt")

    print("wrote " + ", ".join(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
