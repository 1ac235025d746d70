"""What cheaper hot-path code would save: `python -m benchmarks.alternatives [--quick]`.

For each expensive step of a warm `convert` (as the profile finds them), the expression the
core or an adapter runs today is timed next to cheaper equivalents, interleaved in one
process, each checked to give the same answer first. The floor rows show what a conversion
cannot avoid (the framework's own export and import) and what one ctypes call costs, which
bounds any design that reads capsules from Python. Writes results/alternatives.md.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import struct
import sys
from pathlib import Path
from typing import Any, NamedTuple

from . import env
from .timing import LOOP_OVERHEAD, Case, interleaved


def _groups() -> list[tuple[str, dict[str, Any], list[tuple[str, str]]]]:
    """(question, namespace, [(label, stmt)]); the first stmt of a group is today's code."""
    np = env.import_framework("numpy")
    import interop
    from interop import capsule as cap
    from interop.info import read_capsule

    x = np.arange(1000, dtype=np.float32)
    kept = x.__dlpack__(max_version=(1, 0))
    address = cap._get_pointer(kept, b"dltensor_versioned")
    ml = frozenset(
        "bfloat16 float8_e3m4 float8_e4m3 float8_e4m3b11fnuz float8_e4m3fn float8_e4m3fnuz "
        "float8_e5m2 float8_e5m2fnuz float8_e8m0fnu".split()
    )
    ns: dict[str, Any] = {
        "np": np,
        "interop": interop,
        "cap": cap,
        "read_capsule": read_capsule,
        "kept": kept,
        "address": address,
        "ctypes": ctypes,
        "struct": struct,
        "ML": ml,
        "HEAD": struct.Struct("=IIQQQQiiiBBHQQQ"),  # DLManagedTensorVersioned, 80 bytes
        "get_pointer": cap._get_pointer,
        "name": b"dltensor_versioned",
        "x": x,
        "PLANS": {},
    }
    groups = [
        (
            "NumPy adapter export(): is this an ml_dtypes array?",
            ns,
            [
                ("x.dtype.name not in ML (today)", "x.dtype.name not in ML"),
                ("x.dtype.isbuiltin != 2", "x.dtype.isbuiltin != 2"),
                ("x.dtype.kind != 'V'", "x.dtype.kind != 'V'"),
            ],
        ),
        (
            "Reading a versioned capsule (NumPy's, 1-D)",
            ns,
            [
                ("read_capsule(capsule) (today)", "read_capsule(kept, 'numpy', True)"),
                ("PyCapsule_GetPointer via ctypes alone", "get_pointer(kept, name)"),
                ("ctypes.string_at(address, 80) alone", "ctypes.string_at(address, 80)"),
                (
                    "pointer + one string_at + one unpack (header only)",
                    "HEAD.unpack(ctypes.string_at(get_pointer(kept, name), 80))",
                ),
            ],
        ),
        (
            "What NumPy itself costs (the floor of a NumPy source)",
            ns,
            [
                ("NumPy's versioned export", "x.__dlpack__(max_version=(1, 0))"),
                ("NumPy's legacy export", "x.__dlpack__()"),
                (
                    "a plan-cache key from NumPy attributes",
                    "(type(x), x.dtype.num, x.flags.c_contiguous, x.flags.writeable)",
                ),
                ("one dict lookup on a small tuple key", "PLANS.get((1, 'torch', None))"),
            ],
        ),
    ]
    info = read_capsule(kept, "numpy", True)
    kind = type(info)
    names = getattr(kind, "_fields", None) or [f.name for f in dataclasses.fields(info)]
    ns["fields"] = [getattr(info, f) for f in names]
    ns["TensorInfo"] = kind
    ns["InfoTuple"] = NamedTuple("InfoTuple", [(f, Any) for f in names])
    today = "a NamedTuple" if hasattr(kind, "_fields") else "a frozen dataclass"
    groups.append(
        (
            "TensorInfo construction (once per conversion)",
            ns,
            [
                (f"TensorInfo, {today} (today)", "TensorInfo(*fields)"),
                ("typing.NamedTuple with the same fields", "InfoTuple(*fields)"),
                ("plain tuple", "tuple(fields)"),
            ],
        )
    )
    if _importable("torch"):
        torch = env.import_framework("torch")
        t = torch.arange(1000, dtype=torch.float32)
        tns = dict(ns, torch=torch, t=t, to_dlpack=torch.utils.dlpack.to_dlpack)
        tns["fast_convert"] = _fast_convert_prototype(np, torch)
        versioned = getattr(torch._C, "_to_dlpack_versioned", None)
        if versioned is not None:
            tns["to_versioned"] = versioned
        export = [
            ("t.__dlpack__(max_version=(1, 0)) (today)", "t.__dlpack__(max_version=(1, 0))"),
            ("torch.utils.dlpack.to_dlpack(t) (legacy capsule)", "to_dlpack(t)"),
        ]
        if versioned is not None:
            export.append(("torch._C._to_dlpack_versioned(t) (private)", "to_versioned(t)"))
        describe = _c_exchange_describe(torch.Tensor)
        if describe is not None:
            tns["c_describe"] = describe
            tns["read_capsule"] = read_capsule
            groups.append(
                (
                    "torch source: describe the tensor (DLPack 1.3 C exchange API, via ctypes)",
                    tns,
                    [
                        (
                            "export a versioned capsule + read_capsule (today)",
                            "read_capsule(t.__dlpack__(max_version=(1, 0)), 'torch', True)",
                        ),
                        (
                            "dltensor_from_py_object_no_sync + one unpack (no capsule)",
                            "c_describe(t)",
                        ),
                    ],
                )
            )
        groups += [
            ("torch source: export", tns, export),
            (
                "torch source: which device (for the stream question)",
                tns,
                [
                    ("t.__dlpack_device__() (today, via _stream)", "t.__dlpack_device__()"),
                    ("t.is_cuda", "t.is_cuda"),
                    ("t.device.type", "t.device.type"),
                ],
            ),
            (
                "torch target: import of a NumPy capsule (export included)",
                tns,
                [
                    (
                        "torch.from_dlpack(capsule) (today)",
                        "torch.from_dlpack(x.__dlpack__(max_version=(1, 0)))",
                    ),
                    (
                        "torch._C._from_dlpack(capsule) (private)",
                        "torch._C._from_dlpack(x.__dlpack__(max_version=(1, 0)))",
                    ),
                    ("torch.from_dlpack(x) (object)", "torch.from_dlpack(x)"),
                ],
            ),
            (
                "The whole call, NumPy -> torch: today, a fingerprint fast path, direct",
                tns,
                [
                    ("interop.convert (today)", "interop.convert(x, 'torch')"),
                    ("prototype: fingerprint + cached route (below)", "fast_convert(x, 'torch')"),
                    ("direct", "torch.from_dlpack(x.__dlpack__())"),
                ],
            ),
        ]
    groups += _copy_groups(np)
    return groups


def _copy_groups(np: Any) -> list[tuple[str, dict[str, Any], list[tuple[str, str]]]]:
    """Forced copies of 40 MB: each framework's own copy (what the adapters call today)
    against a NumPy copy of the same memory, viewed through DLPack, that the target can then
    share (NumPy asks the kernel for transparent huge pages on large allocations)."""
    out = []
    n = 10_000_000
    cases = {
        "torch": (
            "t.clone(memory_format=torch.contiguous_format)",
            "torch.arange({n}, dtype=torch.float32)",
        ),
        "jax": (
            "jnp.array(t, copy=True).block_until_ready()",
            "jnp.arange({n}, dtype=jnp.float32).block_until_ready()",
        ),
        "tensorflow": ("tf.raw_ops.DeepCopy(x=t)", "tf.range({n}, dtype=tf.float32)"),
        "paddle": ("t.clone()", "paddle.arange({n}, dtype='float32')"),
    }
    for module, (today, make) in cases.items():
        if not _importable(module):
            continue
        from .frameworks import spec_for

        spec = spec_for(module)
        if spec is None:
            continue
        ns = {**spec.names, "np": np}
        ns["t"] = eval(make.format(n=n), ns)
        ns["x"] = ns["t"]
        out.append(
            (
                f"Forced copy of a 40 MB {module} tensor",
                ns,
                [
                    (f"the framework's own copy (today: the {module} adapter's copy())", today),
                    ("NumPy copy of its DLPack view", "np.from_dlpack(t).copy()"),
                    (
                        "reference: np.copyto into a fresh array",
                        "np.copyto(np.empty(t.shape, np.float32), np.from_dlpack(t))",
                    ),
                ],
            )
        )
    return out


def _fast_convert_prototype(np: Any, torch: Any) -> Any:
    """A sketch of a warm path that never reads the capsule: the source adapter gives a cheap
    fingerprint of everything a plan depends on (here NumPy's type, dtype number, contiguity
    and writability), and the first convert of each fingerprint caches the route it chose
    (here: a legacy capsule straight into torch.from_dlpack). Not general; it measures what
    such a design could cost."""
    routes: dict[Any, Any] = {}
    from_dlpack = torch.from_dlpack

    def route(x: Any) -> Any:
        return from_dlpack(x.__dlpack__())

    def fast_convert(x: Any, to: str) -> Any:
        flags = x.flags
        found = routes.get((type(x), x.dtype.num, flags.c_contiguous, flags.writeable, to))
        if found is not None:
            return found(x)
        key = (type(x), x.dtype.num, flags.c_contiguous, flags.writeable, to)
        routes[key] = route  # the real thing: the route of interop.explain(x, to)
        return route(x)

    return fast_convert


def _c_exchange_describe(kind: type) -> Any:
    """`describe(t)`: the DLTensor fields of `t`, read through its type's DLPack 1.3 C
    exchange API (`dltensor_from_py_object_no_sync`: non-owning, no capsule), or None."""
    api_capsule = getattr(kind, "__dlpack_c_exchange_api__", None)
    if api_capsule is None:
        return None
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi)
    )
    api = get(api_capsule, b"dlpack_exchange_api")
    major, _minor, _prev = struct.unpack("=IIQ", ctypes.string_at(api, 16))
    # header, then allocator, managed_from_py, managed_to_py, dltensor_from_py, work stream
    slot = struct.unpack("=5Q", ctypes.string_at(api + 16, 40))[3]
    if major != 1 or not slot:
        return None
    fill = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(slot)
    out = ctypes.create_string_buffer(48)  # a DLTensor
    where = ctypes.addressof(out)
    layout = struct.Struct("=QiiiBBHQQQ")

    def describe(t: Any) -> tuple[Any, ...]:
        if fill(t, where):
            raise BufferError("dltensor_from_py_object_no_sync failed")
        return layout.unpack(out.raw)

    return describe


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.alternatives", description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=env.ROOT / "benchmarks" / "results")
    args = p.parse_args(argv)
    rounds, batch = (31, 100_000) if args.quick else (101, 200_000)
    for module in env.import_order(["numpy", "torch", "jax", "tensorflow", "paddle"]):
        if _importable(module):
            env.import_framework(module)  # in an order that does not crash (Paddle first)
    lines = [
        "# Hot-path alternatives (µs per call, median, interleaved within each group)",
        "",
        f"{env.machine()['date']}; {env.machine()['cpu']}.",
        "",
    ]
    for question, ns, rows in _groups():
        cases = {"loop": Case(LOOP_OVERHEAD, ns.get("x"), ns)}
        answers = {}
        for label, stmt in rows:
            try:
                answers[label] = eval(stmt, ns)
            except Exception as exc:
                answers[label] = f"error: {type(exc).__name__}: {exc}"
                continue
            cases[label] = Case(stmt, ns.get("x"), ns)
        big = question.startswith("Forced copy")
        stats = interleaved(
            cases,
            rounds=min(rounds, 15) if big else rounds,
            batch_ns=5_000_000 if big else batch,
            prime=not big,
        )
        loop = stats["loop"].median
        lines += [f"## {question}", "", "| code | µs | saves vs today |", "|---|---|---|"]
        today = None
        for label, stmt in rows:
            if label not in stats:
                lines.append(f"| `{stmt}` | {answers[label]} | |")
                continue
            cost = max(stats[label].median - loop, 0.0) / 1e3
            if today is None and "(today" in label:
                today = cost
            saves = "" if today is None or cost == today else f"{today - cost:+.2f}"
            what = f"`{stmt}`" + ("" if label == stmt else f" — {label}")
            if big:  # 40 MB: say it in ms and GB/s
                lines.append(
                    f"| {what} | {cost / 1e3:.2f} ms, {4e7 / (cost * 1e3):.2f} GB/s | "
                    + (f"{saves[0]}{float(saves[1:]) / 1e3:.2f} ms" if saves else "")
                    + " |"
                )
                continue
            lines.append(f"| {what} | {cost:.3f} | {saves} |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "alternatives.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
