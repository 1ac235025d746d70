"""`interop list` and `interop matrix`: what is installed here, and what converts how."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from . import __version__, matrix
from .api import accelerated, adapters
from .errors import InvalidArgumentError
from .registry import missing_adapters


def _list(args: argparse.Namespace) -> int:
    infos = adapters()
    missing = missing_adapters()
    if args.json:
        listing = {
            "adapters": [info.__dict__ for info in infos],
            "missing_adapters": [{"name": n, "install": i} for n, i in missing.items()],
            "fast_path": accelerated(),
        }
        print(json.dumps(listing, indent=2))
        return 0
    if not infos and not missing:
        print(
            "no adapters installed: pip install ./adapters/<framework> from a clone, "
            "interop-<framework> once published (see README)"
        )
        return 0
    rows = [("adapter", "status", "contract", "framework", "DLPack", "distribution", "note")]
    for i in infos:
        if i.framework_installed is False:
            framework = "not installed"
        else:
            framework = i.framework_version or ""
        dtypes = (
            f"notes for {', '.join(i.dtype_notes)}: see explain or --json" if i.dtype_notes else ""
        )
        note = "; ".join(filter(None, (i.error, i.unavailable, *i.notes, dtypes)))
        dist = f"{i.distribution or 'runtime'} {i.distribution_version or ''}".strip()
        contract = (i.contract or "").replace(" (through the 1.x shim)", " (shim)")
        rows.append((i.name, i.status, contract, framework, i.dlpack or "", dist, note))
    for name, install in missing.items():
        rows.append((name, "no adapter", "", "installed", "", "", f"install it: {install}"))
    widths = [max(len(r[k]) for r in rows) for k in range(6)]
    for r in rows:
        print("  ".join(f"{r[k]:<{widths[k]}}" for k in range(6)) + "  " + r[6])
    print(f"\nfast path: {accelerated()}")
    return 0


def _matrix(args: argparse.Namespace) -> int:
    try:  # one spelling table with the API: aliases (pytorch) and the grid's dtypes (f64)
        frameworks = list(dict.fromkeys(matrix.framework_name(f) for f in args.frameworks or ()))
        dtypes = list(dict.fromkeys(matrix.dtype_name(d) for d in args.dtypes or ()))
    except InvalidArgumentError as exc:
        print(f"interop matrix: {exc}", file=sys.stderr)
        return 2
    if len(frameworks or matrix.usable()) < 2:
        named = f" (named: {', '.join(frameworks)})" if frameworks else ""
        print(
            f"interop matrix: it needs at least two different usable frameworks{named}",
            file=sys.stderr,
        )
        return 2
    cells = matrix.run(frameworks or None, dtypes or None, args.repeats)
    if args.json:
        print(json.dumps(matrix.as_dicts(cells), indent=2))
    else:
        names = sorted({c.source for c in cells})
        print(f"conversion matrix of {len(names)} frameworks: {', '.join(names)}\n")
        print(matrix.render(cells))
    return 1 if any(c.outcome == "failed" for c in cells) else 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = argparse.ArgumentParser(
        prog="interop", description=__doc__, epilog="`interop COMMAND --help` describes each."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"interop-hub {__version__}",
        help="print interop-hub's version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one of:")
    p_list = sub.add_parser(
        "list",
        help="adapters, their status and DLPack versions",
        description="Each adapter: its status, its framework's version, the DLPack versions "
        "and dtype notes; installed frameworks without their adapter and the line that "
        "installs it; which fast path (compiled or pure Python) is active.",
    )
    p_list.add_argument(
        "--json", action="store_true", help="print the same as one JSON object, for programs"
    )
    p_list.set_defaults(run=_list)
    p_matrix = sub.add_parser(
        "matrix",
        help="convert real tensors between every pair",
        description="Every ordered pair of usable frameworks x dtype, converted for real and "
        "checked by data address: zero-copy, copied and why, or unsupported and why, with "
        "the median time per call. Exits 1 when a cell failed.",
    )
    p_matrix.add_argument(
        "--json", action="store_true", help="print the cells as a JSON list, for programs"
    )
    p_matrix.add_argument(
        "--frameworks",
        nargs="+",
        metavar="NAME",
        help="only these adapters (names or aliases: pytorch, np); at least two",
    )
    p_matrix.add_argument(
        "--dtypes", nargs="+", metavar="DTYPE", help="only these dtypes (float64 or f64)"
    )
    p_matrix.add_argument(
        "--repeats",
        type=_positive,
        default=25,
        metavar="N",
        help="timed calls per cell (at least 1; default 25)",
    )
    p_matrix.set_defaults(run=_matrix)
    args = parser.parse_args(argv)
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # a closed pipe is found here, not at exit
    except BrokenPipeError:  # `interop list | head -1`: the reader is gone, as for Unix tools
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
