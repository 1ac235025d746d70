"""`interop list` and `interop matrix`."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import matrix
from .api import accelerated, adapters


def _list(args: argparse.Namespace) -> int:
    infos = adapters()
    if args.json:
        print(json.dumps([info.__dict__ for info in infos], indent=2))
        return 0
    if not infos:
        print("no adapters installed: pip install interop-<framework> (see README)")
        return 0
    rows = [("adapter", "status", "framework", "DLPack", "distribution", "note")]
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
        rows.append((i.name, i.status, framework, i.dlpack or "", dist, note))
    widths = [max(len(r[k]) for r in rows) for k in range(5)]
    for r in rows:
        print("  ".join(f"{r[k]:<{widths[k]}}" for k in range(5)) + "  " + r[5])
    print(f"\nfast path: {accelerated()}")
    return 0


def _matrix(args: argparse.Namespace) -> int:
    usable = [a.name for a in matrix.usable()]
    unknown = sorted(set(args.frameworks or ()) - set(usable))
    if unknown:
        print(
            f"interop matrix: unknown or unusable frameworks {', '.join(unknown)} "
            f"(usable here: {', '.join(usable) or 'none'})",
            file=sys.stderr,
        )
        return 2
    bad = sorted(set(args.dtypes or ()) - set(matrix.DTYPES))
    if bad:
        print(
            f"interop matrix: unknown dtypes {', '.join(bad)} (known: {' '.join(matrix.DTYPES)})",
            file=sys.stderr,
        )
        return 2
    if len(args.frameworks or usable) < 2:
        print("interop matrix: it needs at least two usable frameworks", file=sys.stderr)
        return 2
    cells = matrix.run(args.frameworks, args.dtypes, args.repeats)
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
    parser = argparse.ArgumentParser(prog="interop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="adapters, their status and DLPack versions")
    p_list.add_argument("--json", action="store_true")
    p_list.set_defaults(run=_list)
    p_matrix = sub.add_parser("matrix", help="convert real tensors between every pair")
    p_matrix.add_argument("--json", action="store_true")
    p_matrix.add_argument("--frameworks", nargs="*", help="only these adapters")
    p_matrix.add_argument("--dtypes", nargs="*", help="only these dtypes")
    p_matrix.add_argument(
        "--repeats", type=_positive, default=25, help="timed calls per cell (at least 1)"
    )
    p_matrix.set_defaults(run=_matrix)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
