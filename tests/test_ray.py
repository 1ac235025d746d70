"""interop.ray on a real local Ray cluster (127.0.0.1 only, ports chosen by Ray): tensors of
every framework through the object store as raw buffers, read zero-copy where the reader's
framework can hold read-only memory. One cluster for the whole module, shut down at its end;
under pytest-xdist with `--dist loadgroup` (as ci/test.sh runs) the module's tests stay on one
worker (tests/conftest.py's scheduler; the `xdist_group` mark says the same to an xdist that
can read it), so one run starts one cluster.

Where a tensor lives is read from the process's own mappings: the object store is a file
Ray maps shared (/dev/shm/plasma...), so an address inside that mapping is the store's memory.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.util
import io
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import interop

HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(
    not HAVE_RAY, reason="Ray is not installed (pip install 'interop-hub[ray]')"
)
pytestmark = pytest.mark.xdist_group("ray")

N = 1 << 18  # float32 elements: 1 MiB, above what Ray inlines (100 KiB), so in the store
STORE_BYTES = 200 * 1024 * 1024
#: frameworks that can hold read-only memory: they share the store's memory, the rest copy
SHARES = {"jax", "tensorflow"}


def adapter(name: str) -> Any:
    # imported here: this module's functions are pickled by value into Ray's workers, and the
    # registry object itself does not pickle
    from interop.registry import REGISTRY

    return REGISTRY.get(name)


def _usable(name: str) -> bool:
    try:
        return adapter(name).unavailable() is None
    except interop.InteropError:
        return False


def framework(name: str) -> Any:
    """A parameter that skips, with the reason, where the framework or its adapter is absent."""
    return pytest.param(
        name, marks=pytest.mark.skipif(not _usable(name), reason=f"{name} is not usable here")
    )


# --- run in Ray's workers and in this process --------------------------------------------------
def mapping_of(address: int) -> str:
    """The path of the mapping of this process that holds `address` ('' if anonymous)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            low, high = (int(a, 16) for a in fields[0].split("-"))
            if low <= address < high:
                return fields[5].strip() if len(fields) > 5 else ""
    raise AssertionError(f"{address:#x} is in no mapping of this process")


def in_store(address: int) -> bool:
    return "plasma" in mapping_of(address)


def sample(name: str, n: int = N) -> Any:
    return adapter(name).sample("float32", (n,))


def facts(x: Any, name: str) -> dict[str, Any]:
    """What a reader can tell of `x`, a tensor of framework `name`: its type, whether its
    memory is the store's, its bytes' digest, and its sum by the framework's own kernel."""
    fw = adapter(name)
    assert fw.owns(x), f"{type(x)} is not a {name} tensor"
    _, total = fw.exercise(x)
    return {
        "in_store": in_store(fw.data_address(x)),
        "digest": hashlib.sha256(fw.to_bytes(x)).hexdigest(),
        "sum": float(interop.convert(total, "numpy")),
    }


def make_remotes(ray: Any) -> tuple[Any, Any]:
    import interop.ray

    @ray.remote(num_cpus=0)
    class Producer:
        """Makes tensors of one framework; torch's serializers come from the cluster's setup
        hook, any other framework's from install() here."""

        def __init__(self, name: str) -> None:
            self.name = name
            self.kept: list[Any] = []
            if name != "torch":
                interop.ray.install(name)

        def installed(self) -> tuple[str, ...]:
            return interop.ray.installed()

        def make(self) -> Any:
            return sample(self.name)

        def expected(self) -> dict[str, Any]:
            """The facts of what `make` returns, read here (samples are deterministic)."""
            return facts(sample(self.name), self.name)

        def put(self) -> list[Any]:
            """An object this actor owns, as a ref the caller borrows."""
            self.kept.append(ray.put(sample(self.name)))
            return self.kept[-1:]

        def meta(self) -> Any:
            import torch

            return torch.empty(3, device="meta")

    @ray.remote
    def read(refs: list[Any], to: str) -> dict[str, Any]:
        return facts(interop.ray.get(refs[0], to=to), to)

    return Producer, read


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'interop-hub[ray]')")
    import interop.ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack tests/
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths are bounded
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=STORE_BYTES,
        _temp_dir=temp,
        configure_logging=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": interop.ray.setup_hook("torch")},
    )
    try:
        yield ray, *make_remotes(ray)
    finally:
        interop.ray.uninstall()
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def installed(cluster):
    import interop.ray

    yield interop.ray.install("torch", "jax")
    interop.ray.uninstall()


# --- without a cluster ---------------------------------------------------------------------------
IMPORTS = """
import sys
import interop
print("ray" in sys.modules, "interop.ray" in sys.modules)
try:
    import torch, ray.cloudpickle as cp
except ImportError:
    sys.exit()
import interop.ray
plain = cp.dumps(torch.ones(4))
print(b"interop" in plain, interop.ray.install("torch"), b"interop.ray" in cp.dumps(torch.ones(4)))
interop.ray.uninstall()
print(b"interop" in cp.dumps(torch.ones(4)), interop.ray.installed())
"""


def test_importing_interop_imports_no_ray_and_importing_the_integration_changes_nothing():
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split("\n")
    assert lines[0] == "False False", done.stdout
    if HAVE_RAY and _usable("torch"):
        assert lines[1:3] == ["False ('torch',) True", "False ()"], done.stdout


class FromADevice:
    """What `interop.ray` stores for a torch tensor of cuda:0 (its host copy and its device),
    made without a GPU."""

    def __init__(self, view: Any) -> None:
        self.view = view

    def __reduce__(self) -> Any:
        from interop import ray as iray

        return iray._restore, (("torch", self.view, "cuda:0"),)


def test_a_device_the_reader_lacks_is_a_typed_error_naming_the_framework(cluster):
    ray = cluster[0]
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the tensor would be rebuilt there")
    from interop import ray as iray

    ref = ray.put(FromADevice(interop.convert(torch.arange(3.0), "numpy")))
    with pytest.raises(ray.exceptions.RaySystemError, match="ObjectStoreError"):
        ray.get(ref)  # Ray's own report of a failure while unpickling
    with pytest.raises(interop.ObjectStoreError, match=r"this torch tensor.*cuda") as caught:
        iray.get(ref)
    assert isinstance(caught.value.__cause__, interop.DeviceError)
    assert iray.get(ref, to="torch").tolist() == [0.0, 1.0, 2.0]  # read where it is asked


# --- one process of the cluster: the driver -------------------------------------------------------
@pytest.mark.parametrize("name", [framework("torch"), framework("jax"), framework("tensorflow")])
def test_a_tensor_comes_back_as_its_framework_sharing_the_store_where_it_cannot_write(
    cluster, installed, name
):
    ray = cluster[0]
    from interop import ray as iray

    iray.install(name)
    x = sample(name)
    back = ray.get(ray.put(x))
    assert type(back) is type(x)
    got, sent = facts(back, name), facts(x, name)
    assert got["in_store"] == (name in SHARES)
    assert got["digest"] == sent["digest"] and got["sum"] == sent["sum"]


def test_a_write_through_a_writable_result_never_reaches_the_stored_object(cluster, installed):
    ray = cluster[0]
    from interop import ray as iray

    ref = ray.put(sample("torch"))
    original = facts(ray.get(ref), "torch")["digest"]
    for written in (ray.get(ref), iray.get(ref, to="torch")):
        assert adapter("torch").mutate(written)
        assert facts(written, "torch")["digest"] != original
    view = iray.get(ref, to="numpy")
    assert in_store(view.ctypes.data) and not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 1
    with pytest.raises(interop.CopyForbiddenError):
        iray.get(ref, to="torch", copy=False)
    assert facts(ray.get(ref), "torch")["digest"] == original  # what every other reader sees
    assert hashlib.sha256(view.tobytes()).hexdigest() == original


@pytest.mark.parametrize("layout", ["step-sliced", "transposed"])
def test_a_strided_tensor_is_stored_out_of_band_with_its_values(cluster, installed, layout):
    # NumPy pickles an array in band (a copy readers cannot map) unless it is C- or
    # Fortran-ordered: a step slice is compacted once at put, a transpose kept as it is
    ray = cluster[0]
    torch = pytest.importorskip("torch")
    from interop import ray as iray

    base = torch.arange(4 * N, dtype=torch.float32).reshape(1024, -1)
    x = base[:, ::2] if layout == "step-sliced" else base.T
    ref = ray.put(x)
    view = iray.get(ref, to="numpy")
    assert in_store(view.ctypes.data)
    assert view.flags.f_contiguous == (layout == "transposed")
    assert torch.equal(ray.get(ref), x) and torch.equal(torch.from_numpy(view.copy()), x)


def test_a_state_dict_travels_as_a_tree_and_reads_as_jax_zero_copy(cluster, installed):
    ray = cluster[0]
    torch = pytest.importorskip("torch")
    from interop import ray as iray

    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 4))
    state = model.state_dict()
    ref = ray.put(state)
    params = iray.get(ref, to="jax")
    assert list(params) == list(state)
    weight = params["0.weight"]
    assert in_store(weight.unsafe_buffer_pointer())  # 1 MiB: out of band, in the store
    for key, value in state.items():
        assert interop.convert(params[key], "numpy").tobytes() == value.numpy().tobytes()
    again = ray.get(ref)
    assert type(again) is type(state) and torch.equal(again["1.bias"], state["1.bias"])


def test_numpy_arrays_keep_rays_own_path(cluster, installed):
    ray = cluster[0]
    np = pytest.importorskip("numpy")
    from interop import ray as iray

    a = np.arange(N, dtype=np.float32)
    assert b"interop" not in ray.cloudpickle.dumps(a)
    back = ray.get(ray.put(a))
    assert type(back) is np.ndarray and not back.flags.writeable and in_store(back.ctypes.data)
    j = iray.get(ray.put(a), to="jax")
    assert in_store(j.unsafe_buffer_pointer()) and float(j[-1]) == N - 1


@pytest.mark.parametrize("how", ["meta tensor", "tensor that requires grad", "string tensor"])
def test_a_tensor_ray_cannot_carry_is_a_typed_error_naming_its_framework(cluster, installed, how):
    ray = cluster[0]
    if how == "meta tensor":
        torch = pytest.importorskip("torch")
        bad, name = torch.empty(3, device="meta"), "torch"
    elif how == "tensor that requires grad":  # never silently detached
        torch = pytest.importorskip("torch")
        bad, name = torch.ones(3, requires_grad=True) * 2, "torch"
    else:
        if not _usable("tensorflow"):
            pytest.skip("tensorflow is not usable here")
        import tensorflow as tf

        from interop import ray as iray

        iray.install("tensorflow")
        bad, name = tf.constant(["a", "b"]), "tensorflow"
    with pytest.raises(interop.ObjectStoreError, match=f"this {name} tensor") as caught:
        ray.put(bad)
    assert isinstance(caught.value.__cause__, interop.InteropError)
    if how == "tensor that requires grad":
        assert "x.detach()" in str(caught.value)
        param = ray.get(ray.put(torch.nn.Parameter(torch.ones(2))))  # Ray's own path
        assert type(param) is torch.nn.Parameter and param.requires_grad

    @ray.remote
    def arg(x: Any) -> None:
        return None

    with pytest.raises(interop.ObjectStoreError, match=f"this {name} tensor"):
        arg.remote({"batch": [bad]})


def test_one_thousand_rounds_leak_neither_memory_nor_store(cluster, installed):
    ray = cluster[0]
    from interop import ray as iray

    x = sample("torch", N // 4)  # 256 KiB: still in the store
    store = store_bytes(ray)

    def rounds(count: int) -> None:
        for i in range(count):
            ref = ray.put(x)
            back = ray.get(ref) if i % 2 else iray.get(ref, to="jax")
            del ref, back

    rounds(100)
    gc.collect()
    before = rss_anon()
    rounds(1000)
    gc.collect()
    grown = rss_anon() - before
    assert grown < 16 * 1024 * 1024, f"RSS grew by {grown / 2**20:.1f} MiB over 1,000 rounds"
    deadline = time.monotonic() + 30  # Ray frees objects asynchronously
    while store_bytes(ray) > store + N and time.monotonic() < deadline:
        time.sleep(0.2)
    assert store_bytes(ray) <= store + N, "objects left in the store"


def rss_anon() -> int:
    """Bytes of this process's private memory (the store's mapped pages are not)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def store_bytes(ray: Any) -> int:
    from ray._private.internal_api import get_memory_info_reply, get_state_from_address

    address = ray.get_runtime_context().gcs_address
    return int(
        get_memory_info_reply(get_state_from_address(address)).store_stats.object_store_bytes_used
    )


# --- across processes: producer actors, consumer tasks -----------------------------------------
@pytest.mark.parametrize(
    "name",
    [framework("torch"), framework("tensorflow"), framework("paddle"), framework("mxnet")],
)
def test_a_producer_actor_and_a_jax_consumer_task_share_the_store(cluster, name):
    ray, producer, read = cluster
    if not _usable("jax"):
        pytest.skip("jax is not usable here")
    actor = producer.remote(name)
    try:
        assert name in ray.get(actor.installed.remote())
        # the ref nested in a list reaches the task as a ref: the task reads it as JAX's
        got = ray.get(read.remote([actor.make.remote()], "jax"))
        sent = ray.get(actor.expected.remote())
        assert got["in_store"] is True
        assert got["digest"] == sent["digest"]
        assert got["sum"] == pytest.approx(sent["sum"], rel=1e-5)
    finally:
        ray.kill(actor)


def test_an_object_freed_by_its_owner_stays_valid_for_a_reader_holding_it(cluster, installed):
    ray, producer, _ = cluster
    np = pytest.importorskip("numpy")
    from interop import ray as iray

    owner = producer.remote("torch")
    [ref] = ray.get(owner.put.remote())
    sent = ray.get(owner.expected.remote())
    x = iray.get(ref, to="jax")
    assert in_store(x.unsafe_buffer_pointer())
    del ref
    ray.kill(owner)  # the owner is gone, and its objects with it
    for _ in range(6):  # the store's memory is reused (48 MiB a time, 200 MiB in all)
        filler = ray.put(np.full(12 * 2**20, 7.0, dtype=np.float32))
        del filler
    got = facts(x, "jax")
    assert got["in_store"] and got["digest"] == sent["digest"]


def test_the_docs_example_runs_as_written(cluster):
    # docs/ray.md's example, on this module's cluster (started with the same setup hook)
    pytest.importorskip("torch")
    if not _usable("jax"):
        pytest.skip("jax is not usable here")
    page = (Path(__file__).resolve().parent.parent / "docs" / "ray.md").read_text()
    code = re.search(r"<!-- run: [^>]*-->\n```python\n(.*?)```", page, re.S).group(1)
    assert "ray.init(runtime_env=" in code
    code = "\n".join(line for line in code.splitlines() if not line.startswith("ray.init("))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/ray.md", "exec"), {"__name__": "docs_ray_example"})
    finally:
        from interop import ray as iray

        iray.uninstall()
    assert out.getvalue().strip() == "262144.0"
