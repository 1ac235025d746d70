"""Sharded conversion against gather-and-reshard, on 2 and 4 ranks (CPU, gloo, jax.distributed).

    python -m benchmarks.sharding [--ranks 2,4] [--sizes 4KB,64MB] [--json PATH]

For each world size, one process per rank (torch gloo and jax.distributed on 127.0.0.1) times,
per direction and global size (a float32 array sharded by rows), side by side in lockstep
rounds, three routes to the same distributed array (checked once per case):

- interop: `interop.convert(dtensor, "jax")` / `interop.convert(array, "torch")`;
- the hand-written per-shard glue it replaces: `jax.dlpack.from_dlpack(dtensor.to_local())`
  into `jax.make_array_from_single_device_arrays` over a prepared sharding /
  `torch.from_dlpack` of the local shard into `DTensor.from_local(..., run_check=False)`;
- gather and re-shard: `dtensor.full_tensor()` then `jax.make_array_from_callback` slicing each
  process's piece / `multihost_utils.process_allgather(array, tiled=True)` then
  `DTensor.from_local` of each rank's slice.

A round times each route on every rank after a barrier; its time is the slowest rank's (the
distributed result exists only once every rank has it); the order rotates between rounds.
Reported: the median per call of each route and the median over rounds of the ratios
(paired).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import env

SIZES = {"4KB": 4 << 10, "64MB": 64 << 20}
COLUMNS = 256  # float32 rows of 1 KB: 4 KB is 4 rows, one per rank at most


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sharding", description=__doc__)
    parser.add_argument("--ranks", default="2,4", help="world sizes, comma-separated")
    parser.add_argument("--sizes", default="4KB,64MB", help=f"global sizes among {list(SIZES)}")
    parser.add_argument("--rounds", type=int, default=0, help="rounds per case (default: by size)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per world size")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    return parser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(world: int, sizes: list[str], rounds: int, timeout: float) -> list[dict[str, Any]]:
    """Run `world` ranks of this module's worker; rank 0's results."""
    ports = [str(_free_port()), str(_free_port())]
    spec = json.dumps({"sizes": sizes, "rounds": rounds})
    extra = {"OMP_NUM_THREADS": "1", "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for rank in range(world):
            with open(Path(tmp, f"{rank}.log"), "w") as log:
                args = ["--worker", str(rank), str(world), *ports, spec]
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "benchmarks.sharding", *args],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=env.ROOT,
                        env={**os.environ, **extra},
                    )
                )
        deadline = time.monotonic() + timeout
        try:
            for proc in procs:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        log0 = Path(tmp, "0.log").read_text()
        failed = [r for r, p in enumerate(procs) if p.returncode != 0]
        if failed:
            tail = Path(tmp, f"{failed[0]}.log").read_text()[-3000:]
            raise RuntimeError(f"{world} ranks: rank {failed[0]} failed\n{tail}")
    lines = [line for line in log0.splitlines() if line.startswith("RESULT ")]
    return list(json.loads(lines[-1][7:]))


def _timed(fn: Any, reps: int, dist: Any, torch: Any) -> float:
    """Per-call seconds of `reps` calls of fn on this rank, as the slowest rank saw them."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    mine = torch.tensor([(time.perf_counter() - start) / reps], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine)


def _same(a: Any, b: Any, dt: Any) -> bool:
    """Whether two results of one direction hold the same values in the same layout."""
    import numpy as np

    if hasattr(a, "placements"):
        return bool((a.to_local() == b.to_local()).all()) and a.placements == b.placements
    mine = np.asarray(a.addressable_shards[0].data)
    theirs = np.asarray(b.addressable_shards[0].data)
    local = dt.to_local().numpy()
    return bool(np.array_equal(mine, theirs) and np.array_equal(mine, local)) and (
        a.sharding.is_equivalent_to(b.sharding, 2)
    )


def _worker(rank: int, world: int, torch_port: int, jax_port: int, spec: dict[str, Any]) -> None:
    import datetime

    import jax
    import numpy as np
    import torch
    import torch.distributed as dist
    from jax.experimental import multihost_utils
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import interop

    jax.distributed.initialize(f"127.0.0.1:{jax_port}", world, rank, initialization_timeout=120)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{torch_port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=300),
    )
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("x",))
    devices = sorted(jax.devices(), key=lambda d: d.process_index)
    jmesh = jax.sharding.Mesh(np.array(devices), ("x",))
    sharding = jax.sharding.NamedSharding(jmesh, jax.sharding.PartitionSpec("x"))
    results = []
    for size in spec["sizes"]:
        rows = SIZES[size] // 4 // COLUMNS
        full = torch.arange(rows * COLUMNS, dtype=torch.float32).reshape(rows, COLUMNS)
        dt = distribute_tensor(full, mesh, [Shard(0)])
        j = interop.convert(dt, "jax")
        piece = rows // world

        def gather_to_jax(dt: Any = dt) -> Any:
            whole = dt.full_tensor().numpy()
            out = jax.make_array_from_callback(whole.shape, sharding, lambda i: whole[i])
            return out.block_until_ready()

        def gather_to_torch(j: Any = j, piece: int = piece, full: Any = full) -> Any:
            whole = multihost_utils.process_allgather(j, tiled=True)  # read-only NumPy
            local = torch.from_numpy(whole[rank * piece : (rank + 1) * piece].copy())
            return DTensor.from_local(
                local, mesh, [Shard(0)], run_check=False, shape=full.shape, stride=full.stride()
            )

        def glue_to_jax(dt: Any = dt, full: Any = full) -> Any:
            local = jax.dlpack.from_dlpack(dt.to_local())
            return jax.make_array_from_single_device_arrays(tuple(full.shape), sharding, [local])

        def glue_to_torch(j: Any = j, full: Any = full) -> Any:
            local = torch.from_dlpack(j.addressable_shards[0].data)
            return DTensor.from_local(
                local, mesh, [Shard(0)], run_check=False, shape=full.shape, stride=full.stride()
            )

        routes = {
            "torch->jax": (dt, "jax", glue_to_jax, gather_to_jax),
            "jax->torch": (j, "torch", glue_to_torch, gather_to_torch),
        }
        for direction, (source, target, glue, gather) in routes.items():

            def sharded(source: Any = source, target: str = target) -> Any:
                return interop.convert(source, target)

            made = {"interop": sharded(), "glue": glue(), "gather": gather()}  # and warm
            same = all(_same(made["interop"], other, dt) for other in made.values())
            big = SIZES[size] >= 1 << 20
            reps, rounds = (1, spec["rounds"] or 7) if big else (20, spec["rounds"] or 30)
            fns = {"interop": sharded, "glue": glue, "gather": gather}
            times: dict[str, list[float]] = {name: [] for name in fns}
            for index in range(rounds):
                names = list(fns)[index % 3 :] + list(fns)[: index % 3]
                for name in names if index % 2 else names[::-1]:
                    times[name].append(_timed(fns[name], reps, dist, torch))
            row: dict[str, Any] = {
                "ranks": world,
                "direction": direction,
                "size": size,
                "bytes": SIZES[size],
                "same_result": same,
                "zero_copy": interop.explain(source, target).zero_copy,
                "rounds": rounds,
                "calls_per_round": reps,
            }
            for name in fns:
                row[f"{name}_us"] = statistics.median(times[name]) * 1e6
            for name in ("glue", "gather"):
                pairs = zip(times["interop"], times[name], strict=True)
                row[f"ratio_{name}"] = statistics.median(a / b for a, b in pairs)
            results.append(row)
    dist.barrier()
    if rank == 0:
        print("RESULT " + json.dumps(results), flush=True)
    dist.destroy_process_group()
    jax.distributed.shutdown()


def _us(value: float) -> str:
    return f"{value:,.1f} µs" if value < 10_000 else f"{value / 1000:,.1f} ms"


def markdown(rows: list[dict[str, Any]], where: dict[str, Any]) -> str:
    lines = [
        "## Sharded conversion against gather-and-reshard (CPU, gloo, jax.distributed)",
        "",
        f"{where['date']}, {where['cpu']} ({where['cpus']} cores), load average before "
        f"{where['load_average']} and after {where.get('load_average_after')}, git {where['git']}",
        "",
        "Per call, the slowest rank's median; ratios are paired medians over rounds.",
        "",
        "| ranks | direction | global size | interop | hand-written per-shard glue | "
        "gather + reshard | interop / glue | interop / gather | zero-copy | same result |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['ranks']} | {r['direction']} | {r['size']} | {_us(r['interop_us'])} | "
            f"{_us(r['glue_us'])} | {_us(r['gather_us'])} | {r['ratio_glue']:.2f} | "
            f"{r['ratio_gather']:.4f} | {r['zero_copy']} | {r['same_result']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker:
        rank, world, tport, jport, spec = args.worker
        _worker(int(rank), int(world), int(tport), int(jport), json.loads(spec))
        sys.stdout.flush()
        os._exit(0)  # skip interpreter teardown: the groups are closed, the result printed
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        raise SystemExit(f"unknown sizes {unknown}; known: {list(SIZES)}")
    where = env.machine()
    rows: list[dict[str, Any]] = []
    for world in (int(w) for w in args.ranks.split(",")):
        rows += _launch(world, sizes, args.rounds, args.timeout)
    where["load_average_after"] = [round(v, 2) for v in os.getloadavg()]
    text = markdown(rows, where)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"machine": where, "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
