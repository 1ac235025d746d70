"""The measurements: zero-copy overhead and size scaling, forced copies, explain, cold calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from . import frameworks as fws
from .env import ROOT, available_bytes, import_order
from .timing import LOOP_OVERHEAD, Case, Stats, interleaved, paired

GIB = 2**30


@dataclass
class Settings:
    sizes: tuple[int, ...]
    rounds: int
    batch_ns: float
    copy_sizes: tuple[int, ...]
    copy_rounds: int
    copy_batch_ns: float
    cold_pairs: str  # "all", "numpy" (pairs with NumPy on one side) or "some" (NumPy <-> torch)
    cold_repeats: int
    quick: bool = False


QUICK = Settings(
    sizes=(1_000, 1_000_000),
    rounds=31,
    batch_ns=100_000,
    copy_sizes=(1_000_000,),
    copy_rounds=9,
    copy_batch_ns=2_000_000,
    cold_pairs="some",
    cold_repeats=1,
    quick=True,
)
FULL = Settings(
    sizes=(1_000, 100_000, 10_000_000, 100_000_000),
    rounds=101,
    batch_ns=200_000,
    copy_sizes=(100_000, 10_000_000),
    copy_rounds=15,
    copy_batch_ns=5_000_000,
    cold_pairs="numpy",
    cold_repeats=3,
)


@dataclass
class Framework:
    """An installed, usable adapter and, when the route table knows it, its direct routes."""

    name: str  # the adapter's name (`to=`)
    module: str
    adapter: Any
    spec: fws.Spec | None
    note: str | None = None

    def make(self, n: int) -> Any:
        if self.spec is not None:
            return self.spec.make(n)
        if n > 100_000:
            raise ValueError("no constructor in the route table: sample() only for small sizes")
        return self.adapter.sample("float32", (n,))

    def wait(self, expr: str) -> str:
        return self.spec.waited(expr) if self.spec else expr

    def address(self, x: Any) -> int | None:
        try:
            return int(self.adapter.data_address(x))
        except Exception:
            return None


def discover(only: list[str] | None = None) -> tuple[list[Framework], dict[str, str]]:
    """Usable frameworks (adapter loads, framework importable) and why the others are not."""
    import interop
    from interop.registry import REGISTRY

    found: list[Framework] = []
    skipped: dict[str, str] = {}
    infos = {info.name: info for info in interop.adapters()}
    modules = {}
    for name, info in infos.items():
        try:
            modules[name] = REGISTRY.get(name).modules[0] if info.status == "loaded" else name
        except Exception:
            modules[name] = name
    order = import_order(list(modules.values()))
    for info in sorted(infos.values(), key=lambda i: order.index(modules[i.name])):
        if only and info.name not in only:
            continue
        if info.status != "loaded":
            skipped[info.name] = f"adapter {info.status}" + (
                f": {info.error}" if info.error else ""
            )
            continue
        adapter = REGISTRY.get(info.name)
        why = adapter.unavailable()
        if why:
            skipped[info.name] = why
            continue
        module = adapter.modules[0]
        try:
            spec = fws.spec_for(module)
        except Exception as exc:  # the framework does not import here (MXNet without shim, ...)
            skipped[info.name] = f"cannot import {module}: {type(exc).__name__}: {exc}"
            continue
        note = None if spec else "no entry in benchmarks/frameworks.py: library timings only"
        found.append(Framework(info.name, module, adapter, spec, note))
    found.sort(key=lambda f: f.name)
    return found, skipped


def pairs(frameworks: list[Framework]) -> list[tuple[Framework, Framework]]:
    return [(s, d) for s in frameworks for d in frameworks if s is not d]


def _namespace(src: Framework, dst: Framework) -> dict[str, Any]:
    import interop

    names: dict[str, Any] = {}
    for fw in (src, dst):
        if fw.spec:
            names.update(fw.spec.names)
    names["interop"] = interop
    return names


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def _library(dst: Framework, copy: bool | None = None) -> str:
    extra = "" if copy is None else f", copy={copy}"
    return dst.wait(f"interop.convert(x, {dst.name!r}{extra})")


def _aliases(src: Framework, dst: Framework, x: Any, result: Any) -> bool | None:
    a, b = src.address(x), dst.address(result)
    return None if a is None or b is None else a == b


def _check(stmt: str, ns: dict[str, Any], src: Framework, dst: Framework, x: Any) -> bool | None:
    """Run `stmt` once on `x`; whether its result shares x's memory (None: cannot tell)."""
    result = eval(stmt, ns, {"x": x})
    return _aliases(src, dst, x, result)


def _per_call(stats: dict[str, Stats], name: str, loop: float) -> float:
    return max(stats[name].median - loop, 0.0)


# --- zero-copy overhead and size scaling -------------------------------------------------------


@dataclass
class PairResult:
    src: str
    dst: str
    sizes: dict[int, dict[str, Any]] = field(default_factory=dict)
    routes: list[dict[str, Any]] = field(default_factory=list)  # at the smallest size
    best: str | None = None  # label of the fastest zero-copy DLPack route
    obj: str | None = None  # label of the consumer's own from_dlpack(tensor)
    native: str | None = None  # label of the fastest zero-copy non-DLPack route
    skipped: str | None = None

    def json(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "best_direct": self.best,
            "object_route": self.obj,
            "native_route": self.native,
            "skipped": self.skipped,
            "routes": self.routes,
            "sizes": {str(k): v for k, v in self.sizes.items()},
        }


def _fits(n: int, count: int = 4) -> bool:
    free = available_bytes()
    return free is None or free > count * n * 4 + GIB


def overhead(frameworks: list[Framework], settings: Settings, log: Any) -> list[PairResult]:
    """Library vs direct routes for every ordered pair and size, all interleaved per pair.

    The sources of every size are made once per source framework; for each target, the
    library and the direct routes at every size run in the same rounds, so machine noise
    hits every size and both sides alike.
    """
    results = []
    for src in frameworks:
        sources: dict[int, Any] = {}
        notes: dict[int, str] = {}
        for n in settings.sizes:
            if not _fits(n):
                notes[n] = "not enough free memory"
                continue
            try:
                sources[n] = src.make(n)
            except Exception as exc:
                notes[n] = f"cannot make the source: {_error(exc)}"
        for dst in frameworks:
            if dst is src:
                continue
            result = PairResult(src.name, dst.name)
            results.append(result)
            result.sizes = {n: {"skipped": why} for n, why in notes.items()}
            try:
                _overhead_pair(result, src, dst, sources, settings)
            except Exception as exc:
                result.skipped = _error(exc)
            for line in _progress(result):
                log(line)
        sources.clear()
    return results


def _progress(result: PairResult) -> list[str]:
    head = f"  {result.src:>10} -> {result.dst:<10}"
    if result.skipped:
        return [f"{head} skipped: {result.skipped}"]
    out = []
    for n, row in sorted(result.sizes.items()):
        if "library_ns" not in row:
            out.append(f"{head} n={n:.0e}: {row.get('skipped')}")
            continue
        best = row.get("best_ns")
        tail = f"direct {best / 1e3:8.2f} us" if best is not None else "no direct route"
        out.append(f"{head} n={n:.0e}: library {row['library_ns'] / 1e3:8.2f} us, {tail}")
    return out


def _overhead_pair(
    result: PairResult,
    src: Framework,
    dst: Framework,
    sources: dict[int, Any],
    settings: Settings,
) -> None:
    import interop

    ns = _namespace(src, dst)
    smallest = min(settings.sizes)
    if smallest not in sources:
        raise RuntimeError(result.sizes.get(smallest, {}).get("skipped", "no source"))
    library = _library(dst)
    all_routes = fws.routes(src.spec, dst.spec) if src.spec and dst.spec else []
    cases: dict[str, Case] = {"loop": Case(LOOP_OVERHEAD, sources[smallest], ns)}
    timed: dict[int, list[fws.Route]] = {}
    for n, x in sources.items():
        try:
            plan = interop.explain(x, dst.name)
        except Exception as exc:
            if n == smallest:
                raise
            result.sizes[n] = {"skipped": _error(exc)}
            continue
        if not plan.zero_copy:
            reason = "not zero-copy: " + ("; ".join(plan.reasons) or "the plan copies")
            if n == smallest:
                result.skipped = reason
                return
            result.sizes[n] = {"skipped": reason}
            continue
        row: dict[str, Any] = {"library_shares": _check(library, ns, src, dst, x)}
        result.sizes[n] = row
        cases[f"library@{n}"] = Case(library, x, ns)
        timed[n] = []
        for route in all_routes:
            if n != smallest and not (route.dlpack and _valid(result, route)):
                continue
            entry = {"label": route.label, "kind": route.kind, "object": route.is_object}
            try:
                entry["shares"] = _check(route.code, ns, src, dst, x)
            except Exception as exc:
                entry["error"] = _error(exc)
            if n == smallest:
                result.routes.append(entry)
            if "error" not in entry and entry["shares"] is not False:
                timed[n].append(route)
                cases[f"{route.label}@{n}"] = Case(route.code, x, ns)
        if n == smallest:
            cases["explain"] = Case(f"interop.explain(x, {dst.name!r})", x, ns)
    stats = interleaved(cases, rounds=settings.rounds, batch_ns=settings.batch_ns, min_batch=10)
    loop = stats["loop"].median

    def cost(name: str) -> float:
        return _per_call(stats, name, loop)

    first = timed[smallest]
    dlpack = sorted((r for r in first if r.dlpack), key=lambda r: cost(f"{r.label}@{smallest}"))
    result.best = dlpack[0].label if dlpack else None
    result.obj = next((r.label for r in dlpack if r.is_object), None)
    native = sorted((r for r in first if not r.dlpack), key=lambda r: cost(f"{r.label}@{smallest}"))
    result.native = native[0].label if native else None
    for entry in result.routes:
        if f"{entry['label']}@{smallest}" in stats:
            entry["median_ns"] = round(cost(f"{entry['label']}@{smallest}"), 1)
    for n, routes in timed.items():
        row = result.sizes[n]
        row["loop_ns"] = round(loop, 1)
        row["library_ns"] = cost(f"library@{n}")
        row["stats"] = {"library": stats[f"library@{n}"].json()}
        for route in routes:
            row["stats"][route.label] = stats[f"{route.label}@{n}"].json()
        for key, label in (
            ("best", result.best),
            ("object", result.obj),
            ("native", result.native),
        ):
            if label is not None and f"{label}@{n}" in stats:
                row[f"{key}_ns"] = cost(f"{label}@{n}")
        fastest = [cost(f"{r.label}@{n}") for r in routes if r.dlpack]
        if fastest:
            row["fastest_direct_ns"] = min(fastest)
        # Paired per round (both sides measured next to each other): robust to load drifts.
        for key, label in (("best", result.best), ("object", result.obj)):
            if label is not None and f"{label}@{n}" in stats:
                ratio, diff = paired(stats[f"library@{n}"], stats[f"{label}@{n}"], loop)
                row[f"ratio_vs_{key}"], row[f"diff_vs_{key}_ns"] = ratio, diff
        if n != smallest:
            for key, label in (("library", "library"), ("best", result.best)):
                if label is not None and f"{label}@{n}" in stats:
                    ratio, _ = paired(stats[f"{label}@{n}"], stats[f"{label}@{smallest}"], loop)
                    row[f"{key}_ratio_vs_smallest"] = ratio
    result.sizes[smallest]["explain_ns"] = cost("explain")


def _valid(result: PairResult, route: fws.Route) -> bool:
    """Whether a route ran and shared memory at the smallest size."""
    return any(
        e["label"] == route.label and "error" not in e and e.get("shares") is not False
        for e in result.routes
    )


# --- forced copies -----------------------------------------------------------------------------


@dataclass
class CopyResult:
    case: str
    src: str
    dst: str
    nbytes: int
    plan: str
    direct: str | None = None
    ns: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    def gbps(self, name: str) -> float | None:
        t = self.ns.get(name)
        return self.nbytes / t if t else None

    def json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "src": self.src,
            "dst": self.dst,
            "bytes": self.nbytes,
            "plan": self.plan,
            "direct_route": self.direct,
            "median_ns": {k: round(v, 1) for k, v in self.ns.items()},
            "gb_per_s": {k: round(self.gbps(k) or 0.0, 2) for k in self.ns},
            "error": self.error,
        }


NON_COMPACT = "non-compact into compact-only"
READ_ONLY = "read-only into writable-only"
UNALIGNED = "unaligned into aligned-only"
COPY_TRUE = "copy=True"


def _copy_cases(
    frameworks: list[Framework], n: int
) -> list[tuple[str, Framework, Framework, Any, bool | None]]:
    import interop

    cases = []
    for src, dst in pairs(frameworks):
        spec = src.spec
        builders = []
        if spec and spec.strided:
            builders.append((NON_COMPACT, spec.strided))
        if spec and spec.read_only:
            builders.append((READ_ONLY, spec.read_only))
        if spec and spec.unaligned:
            builders.append((UNALIGNED, spec.unaligned))
        for case, build in builders:
            x = build(n)
            try:
                plan = interop.explain(x, dst.name)
            except Exception:
                continue
            if plan.zero_copy:
                continue
            if case == UNALIGNED and plan.copy_at != "import":
                continue
            if case != UNALIGNED and plan.copy_at == "import":
                continue
            cases.append((case, src, dst, x, None))
    for src, dst in pairs(frameworks):
        if src.spec:
            cases.append((COPY_TRUE, src, dst, None, True))
    return cases


def copies(
    frameworks: list[Framework], settings: Settings, best: dict[tuple[str, str], str], log: Any
) -> list[CopyResult]:
    """Forced copies: library throughput against numpy.copyto of the same bytes."""
    import numpy as np

    out = []
    reference = fws.spec_for("numpy")
    assert reference is not None
    for n in settings.copy_sizes:
        if not _fits(n, 8):
            log(f"  n={n:.0e}: not enough free memory")
            continue
        contiguous_ref = reference.make(n)
        strided_ref = reference.strided(n) if reference.strided else contiguous_ref
        prealloc = np.empty(n, np.float32)
        for case, src, dst, x, copy in _copy_cases(frameworks, n):
            ref = strided_ref if case == NON_COMPACT else contiguous_ref
            result = _copy_case(case, src, dst, x, copy, n, ref, prealloc, settings, best)
            out.append(result)
            lib, ref_gbps = result.gbps("library"), result.gbps("copyto_fresh")
            log(
                f"  {case:>30}: {src.name:>10} -> {dst.name:<10} n={n:.0e} "
                + (
                    f"library {lib:6.2f} GB/s, np.copyto {ref_gbps:6.2f} GB/s"
                    if lib and ref_gbps
                    else f"error: {result.error}"
                )
            )
    return out


def _copy_case(
    case: str,
    src: Framework,
    dst: Framework,
    x: Any,
    copy: bool | None,
    n: int,
    ref: Any,
    prealloc: Any,
    settings: Settings,
    best: dict[tuple[str, str], str],
) -> CopyResult:
    import numpy as np

    import interop

    result = CopyResult(case, src.name, dst.name, n * 4, "")
    try:
        if x is None:
            x = src.make(n)
        ns = _namespace(src, dst)
        ns["np"] = np
        ns["dest"] = prealloc
        plan = interop.explain(x, dst.name, copy=copy)
        result.plan = "; ".join(s.action + f" ({s.where})" for s in plan.steps)
        library = _library(dst, copy)
        got = eval(library, ns, {"x": x})
        if _aliases(src, dst, x, got):
            raise AssertionError("the library result shares the source's memory")
        if dst.adapter.to_bytes(got) != src.adapter.to_bytes(x):
            raise AssertionError("the library result differs from the source")
        del got
        cases = {
            "library": Case(library, x, ns),
            "copyto_fresh": Case("np.copyto(np.empty(x.shape, x.dtype), x)", ref, ns),
            "copyto_prealloc": Case("np.copyto(dest, x)", ref, ns),
        }
        if src.spec and src.spec.copy and dst.spec:
            # an unaligned buffer: the importer copies it itself, as it would directly
            copied = "x" if case == UNALIGNED else src.spec.copy.format(x="x")
            route = _direct_copy(src.spec, dst.spec, copied, best.get((src.name, dst.name)), ns, x)
            if route is not None:
                result.direct = route.label if copied == "x" else f"{route.label}, x := {copied}"
                cases["direct"] = Case(route.code, x, ns)
        stats = interleaved(
            cases,
            rounds=settings.copy_rounds,
            batch_ns=settings.copy_batch_ns,
            warmup=1,
            prime=n * 4 < 2**22,  # priming a batch of large copies costs a copy each
        )
        result.ns = {k: s.median for k, s in stats.items()}
    except Exception as exc:
        result.error = _error(exc)
    return result


def _direct_copy(
    src: fws.Spec, dst: fws.Spec, copied: str, label: str | None, ns: dict[str, Any], x: Any
) -> fws.Route | None:
    """The pair's fastest zero-copy route (or, unmeasured, the first that runs) on a copy."""
    for route in fws.routes(src, dst, x=copied):
        if not route.dlpack or (label is not None and route.label != label):
            continue
        try:
            eval(route.code, ns, {"x": x})
        except Exception:
            continue
        return route
    return None


# --- hot-path breakdown ------------------------------------------------------------------------


def breakdown(frameworks: list[Framework], settings: Settings, log: Any) -> list[dict[str, Any]]:
    """Cost of each step of `convert` on its hot path, timed one by one (1e3 float32).

    Uses the core's private helpers as they are today; a step whose helper changed is
    reported as unavailable instead of failing the run.
    """
    from interop import api
    from interop.exchange import Exchange
    from interop.info import read_capsule

    by_name = {fw.name: fw for fw in frameworks}
    out = []
    for s, d in (("numpy", "torch"), ("torch", "numpy")):
        if s not in by_name or d not in by_name:
            continue
        src, dst = by_name[s], by_name[d]
        x = src.make(1000)
        ns = _namespace(src, dst)
        try:
            target = api._target(d)
            adapter, name, scaps = api._source(x)
            tcaps = target.capabilities()
            exchange = api._take(x, adapter, name, target, tcaps, scaps, None)
            versioned = exchange.versioned
            info = exchange.info
            exchange.release()
        except Exception as exc:
            out.append({"src": s, "dst": d, "error": f"internals changed: {_error(exc)}"})
            continue
        export = "x.__dlpack__(max_version=(1, 0))" if versioned else "x.__dlpack__()"
        kept = x.__dlpack__(max_version=(1, 0)) if versioned else x.__dlpack__()
        ns.update(
            api=api,
            target=target,
            adapter=adapter,
            scaps=scaps,
            tcaps=tcaps,
            info=info,
            Exchange=Exchange,
            read_capsule=read_capsule,
            kept=kept,
            src_name=name,
        )
        take = "api._take(x, adapter, src_name, target, tcaps, scaps, None)"
        importer = {"torch": "torch.from_dlpack", "numpy": "np.from_dlpack"}[d]
        deliver_arg = export if d == "torch" else "Exchange.from_source(x, versioned=True)"
        steps = {
            "convert(x, to) — whole call": f"interop.convert(x, {d!r})",
            "_target(to): registry lookup": f"api._target({d!r})",
            "_device(None)": "api._device(None)",
            "_source(x): detect + capabilities()": "api._source(x)",
            "target.capabilities()": "target.capabilities()",
            "adapter.export(x)": "adapter.export(x, writable=True)",
            "_stream(x, target, None)": "api._stream(x, target, None)",
            f"framework export: {export}": export,
            "read_capsule(capsule)": "read_capsule(kept, src_name)",
            "Exchange.from_source(x) = export + read": (
                f"Exchange.from_source(x, versioned={versioned}, framework=src_name)"
            ),
            "_take(...) = export() + _stream + from_source": take,
            "info.layout (classify_layout)": "info.layout",
            "_plan(...) (cache hit)": (
                "api._plan(adapter, src_name, scaps, info, target, tcaps, None, None)"
            ),
            "_take + _deliver (export, read, import)": f"api._deliver({take}, target, tcaps)",
            f"direct: {importer}({deliver_arg})": f"{importer}({deliver_arg})",
            f"direct: {importer}(x)": f"{importer}(x)",
        }
        cases = {"loop": Case(LOOP_OVERHEAD, x, ns)}
        broken = {}
        for label, stmt in steps.items():
            try:
                eval(stmt, ns, {"x": x})
            except Exception as exc:
                broken[label] = _error(exc)
                continue
            cases[label] = Case(stmt, x, ns)
        stats = interleaved(cases, rounds=settings.rounds, batch_ns=settings.batch_ns)
        loop = stats["loop"].median
        rows = [
            {"step": label, "stmt": stmt, "median_ns": round(_per_call(stats, label, loop), 1)}
            if label in stats
            else {"step": label, "stmt": stmt, "error": broken.get(label)}
            for label, stmt in steps.items()
        ]
        out.append({"src": s, "dst": d, "steps": rows})
        log(f"  breakdown {s} -> {d}: convert {rows[0].get('median_ns', 0) / 1e3:.2f} us")
    return out


# --- cold first calls, in fresh processes -------------------------------------------------------


def cold(frameworks: list[Framework], settings: Settings, log: Any) -> list[dict[str, Any]]:
    """First calls in fresh subprocesses: import interop, the first convert and explain."""
    names = [f"{fw.name}:{fw.module}" for fw in frameworks if fw.spec]
    all_pairs = [(s, d) for s in names for d in names if s != d]
    if settings.cold_pairs == "numpy":
        all_pairs = [p for p in all_pairs if "numpy:numpy" in p] or all_pairs
    elif settings.cold_pairs != "all":
        wanted = (("numpy", "torch"), ("torch", "numpy"))
        some = [p for p in all_pairs if (p[0].partition(":")[0], p[1].partition(":")[0]) in wanted]
        all_pairs = some or all_pairs[:2]
    jobs = [(s, d, mode) for s, d in all_pairs for mode in ("convert", "explain")]
    core = [p for p in all_pairs if {q.partition(":")[0] for q in p} == {"numpy", "torch"}]
    jobs += [(s, d, "stages") for s, d in (core or all_pairs[:2])]
    out = []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for src, dst, mode in jobs:
        runs = []
        # single shots are noisy: the NumPy <-> torch processes are repeated (median kept)
        for _ in range(settings.cold_repeats if (src, dst) in core else 1):
            cmd = [sys.executable, "-m", "benchmarks.cold", src, dst, mode]
            try:
                done = subprocess.run(
                    cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
                )
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                if done.returncode or not lines:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    runs.append({"error": f"exit {done.returncode}: {tail[:200]}"})
                else:
                    runs.append(json.loads(lines[-1]))
            except subprocess.TimeoutExpired:
                runs.append({"error": "timed out"})
        good = [r for r in runs if "error" not in r]
        row: dict[str, Any] = {
            "src": src.partition(":")[0],
            "dst": dst.partition(":")[0],
            "mode": mode,
            "runs": len(runs),
        }
        if good:
            for key in good[0]:
                values = sorted(r[key] for r in good if isinstance(r.get(key), (int, float)))
                row[key] = values[len(values) // 2] if values else None
        else:
            row["error"] = runs[-1]["error"]
        out.append(row)
        first = row.get("first_convert_ns") or row.get("first_explain_ns")
        log(
            f"  cold {mode:>7} {row['src']:>10} -> {row['dst']:<10} "
            + (f"first call {first / 1e6:8.2f} ms" if first else f"{row.get('error')}")
        )
    return out
