"""Across processes through Ray: Ray's default serialization against `interop.ray`.

`python -m benchmarks.ray_transfer [--quick] [--json PATH]`

On a local Ray cluster (started here, 127.0.0.1 only, shut down at the end), for each pair
below a producer actor makes a 64 MiB float32 tensor of its framework once, then, in rounds
that alternate Ray's default and the integration:

- put: the actor's `ray.put` of the tensor (the integration: installed in the actor, else
  uninstalled, so Ray pickles the tensor as the framework's own `__reduce__` says);
- get: a task reads it as the consumer's framework: `interop.convert(ray.get(ref), to)` by
  default (the reader gets the producer's tensor, unpickled), `interop.ray.get(ref, to=to)`
  with the integration;
- first op: the consumer framework's own `x + x` and sum on it, read back as a number.

Then a stream of 1 MiB torch batches (a dict of one tensor, as a data loader yields them) from
the actor to a task that reads each as JAX and sums it: the whole stream's time per batch.
Reported: medians over the rounds, in ms, and default / integration per column. Each process
imports its frameworks before it is timed; the store holds at most a few objects at once.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"

from benchmarks import env  # first: sets the TF/JAX environment before any framework

#: (producer, consumer): each producer's tensor read in another framework
PAIRS = (
    ("torch", "jax"),
    ("jax", "torch"),
    ("tensorflow", "torch"),
    ("paddle", "jax"),
    ("mxnet", "jax"),
    ("mlx", "jax"),
)
ELEMENTS = 16 * 2**20  # float32: 64 MiB
BATCH_ELEMENTS = 2**18  # float32: 1 MiB
STEPS = ("put", "get", "first op")


def _adapter(name: str) -> Any:
    from interop.registry import REGISTRY

    return REGISTRY.get(name)


def first_op(x: Any, name: str) -> float:
    """The consumer's first use: its own `x + x` and sum, read back (JAX runs asynchronously)."""
    import interop

    _, total = _adapter(name).exercise(x)
    return float(interop.convert(total, "numpy"))


def remotes(ray: Any) -> tuple[Any, Any, Any]:
    @ray.remote(num_cpus=0)
    class Producer:
        def __init__(self, name: str) -> None:
            from interop import ray as iray

            self.name = name
            self.iray = iray
            self.x = _adapter(name).sample("float32", (ELEMENTS,))
            self.batch = None

        def use(self, integration: bool) -> None:
            if integration:
                self.iray.install(self.name)
            else:
                self.iray.uninstall()

        def put(self) -> tuple[list[Any], float]:
            start = time.perf_counter()
            ref = ray.put(self.x)
            return [ref], time.perf_counter() - start

        def stream(self, count: int) -> list[Any]:
            """`count` batches, each put as a task return would be, refs in order."""
            batch = _adapter(self.name).sample("float32", (BATCH_ELEMENTS,))
            return [ray.put({"x": batch}) for _ in range(count)]

    @ray.remote
    def consume(
        refs: list[Any], source: str, to: str, integration: bool
    ) -> tuple[float, float, float]:
        import interop
        from interop import ray as iray

        for name in (source, to):  # not timed (MXNet's must come through its adapter's shim)
            _adapter(name).import_framework()
        start = time.perf_counter()
        if integration:
            x = iray.get(refs[0], to=to)
        else:
            x = interop.convert(ray.get(refs[0]), to)
        got = time.perf_counter()
        total = first_op(x, to)
        return got - start, time.perf_counter() - got, total

    @ray.remote
    def drain(refs: list[Any], to: str, integration: bool) -> float:
        import interop
        from interop import ray as iray

        start = time.perf_counter()
        for ref in refs:
            if integration:
                batch = iray.get(ref, to=to)
            else:
                batch = interop.convert_tree(ray.get(ref), to)
            first_op(batch["x"], to)
        return time.perf_counter() - start

    return Producer, consume, drain


def usable(name: str) -> bool:
    try:
        return _adapter(name).unavailable() is None
    except Exception:
        return False


def measure(rounds: int, batches: int, log: Any = print) -> dict[str, Any]:
    import ray

    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=512 * 2**20,
        _temp_dir=temp,
        configure_logging=False,
        log_to_driver=False,
    )
    if __name__ != "__main__":  # imported (tests): the workers need not find this module
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    producer_cls, consume, drain = remotes(ray)
    results: dict[str, Any] = {"pairs": [], "stream": None}
    try:
        for source, target in PAIRS:
            if not (usable(source) and usable(target)):
                log(f"skipped {source} -> {target}: not usable here")
                continue
            log(f"{source} -> {target}")
            actor = producer_cls.remote(source)
            times: dict[bool, dict[str, list[float]]] = {
                flag: {step: [] for step in STEPS} for flag in (False, True)
            }
            for i in range(rounds + 1):  # round 0 warms both sides up, untimed
                for flag in (i % 2 == 0, i % 2 != 0):
                    ray.get(actor.use.remote(flag))
                    [ref], put = ray.get(actor.put.remote())
                    got, op, _ = ray.get(consume.remote([ref], source, target, flag))
                    del ref
                    if i:
                        for step, value in zip(STEPS, (put, got, op), strict=True):
                            times[flag][step].append(value * 1e3)
            ray.kill(actor)
            results["pairs"].append(
                {
                    "producer": source,
                    "consumer": target,
                    **{
                        ("integration" if flag else "default"): {
                            step: statistics.median(values) for step, values in steps.items()
                        }
                        for flag, steps in times.items()
                    },
                }
            )
        if usable("torch") and usable("jax"):
            log(f"stream of {batches} 1 MiB torch batches -> jax")
            actor = producer_cls.remote("torch")
            per_batch: dict[bool, list[float]] = {False: [], True: []}
            for i in range(rounds + 1):
                for flag in (i % 2 == 0, i % 2 != 0):
                    ray.get(actor.use.remote(flag))
                    start = time.perf_counter()
                    refs = ray.get(actor.stream.remote(batches))
                    ray.get(drain.remote(refs, "jax", flag))
                    if i:
                        per_batch[flag].append((time.perf_counter() - start) * 1e3 / batches)
                    del refs
            ray.kill(actor)
            results["stream"] = {
                "batches": batches,
                "default": statistics.median(per_batch[False]),
                "integration": statistics.median(per_batch[True]),
            }
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    return results


def markdown(results: dict[str, Any], machine: dict[str, Any], command: str) -> str:
    lines = [
        "# Across processes: Ray's default serialization against interop.ray",
        "",
        f"`{command}` — {machine['date']}, {machine['cpu']}, {machine['cpus']} CPUs, "
        f"load average {machine['load_average']}, Python {machine['python']}, "
        f"ray {_ray_version()}.",
        "",
        "64 MiB float32, actor -> task, median ms (default / interop.ray = ratio):",
        "",
        "| producer -> consumer | put | get | first op | total | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["pairs"]:
        d, i = row["default"], row["integration"]
        cells = [f"{d[s]:.1f} / {i[s]:.1f}" for s in STEPS]
        total_d, total_i = sum(d.values()), sum(i.values())
        lines.append(
            f"| {row['producer']} -> {row['consumer']} | {' | '.join(cells)} | "
            f"{total_d:.1f} / {total_i:.1f} | {total_d / total_i:.1f}x |"
        )
    stream = results["stream"]
    if stream:
        ratio = stream["default"] / stream["integration"]
        lines += [
            "",
            f"Stream of {stream['batches']} 1 MiB torch batches -> JAX, per batch: "
            f"{stream['default']:.2f} ms default, {stream['integration']:.2f} ms interop.ray "
            f"({ratio:.1f}x).",
        ]
    load = machine["load_average"]
    if load and machine["cpus"] and load[0] > machine["cpus"] / 2:
        lines += ["", "The machine was loaded (load average above half the CPUs): noisy figures."]
    return "\n".join(lines) + "\n"


def _ray_version() -> str:
    import ray

    return str(ray.__version__)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, 20 batches")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 11)
    batches = 20 if args.quick else 200
    command = "python -m benchmarks.ray_transfer" + (" --quick" if args.quick else "")
    results = measure(rounds, batches, log=lambda m: print(m, file=sys.stderr))
    machine = env.machine()
    print(markdown(results, machine, command))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, **results}, indent=1))


if __name__ == "__main__":
    main()
