"""Whole structures: state dicts, pytrees and batches converted in one call.

Real structures from the frameworks themselves, checked leaf by leaf through the frameworks'
own APIs (addresses, bytes) and used there: a torch model's state dict runs the model's
forward pass in JAX and is loaded back into torch, a JAX pytree feeds torch kernels, a
tf.data batch feeds a torch step.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import struct
import subprocess
import sys
import typing

import pytest

import interop
from interop.testing import COUNTER, counting_capsule, explain_or_raise

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def jax_address(x) -> int:
    return x.unsafe_buffer_pointer()


def numpy_address(x) -> int:
    return x.__array_interface__["data"][0]


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
    )
    with torch.no_grad():  # running statistics that differ from their defaults
        net[1].running_mean.uniform_(-1, 1)
        net[1].running_var.uniform_(0.5, 2)
        net[1].num_batches_tracked += 5
    return net.eval()


def jax_forward(p: dict, x):
    """The torch model's forward pass written with JAX kernels over converted parameters."""
    h = x @ p["0.weight"].T + p["0.bias"]
    h = (h - p["1.running_mean"]) / jnp.sqrt(p["1.running_var"] + 1e-5)
    h = jnp.maximum(h * p["1.weight"] + p["1.bias"], 0)
    return h @ p["3.weight"].T + p["3.bias"]


# --- a torch state dict, both ways -----------------------------------------------------------
@jax.enable_x64(True)  # num_batches_tracked is int64
def test_state_dict_to_jax_zero_copy_runs_the_forward_pass_and_comes_back():
    net = model()
    state = net.state_dict()
    plan = interop.explain_tree(state, "jax", copy=False)
    assert plan.zero_copy and len(plan.shared) == len(state) == 9, str(plan)
    params = interop.convert_tree(state, "jax", copy=False)
    assert type(params) is type(state) and list(params) == list(state)
    for key, t in state.items():
        assert jax_address(params[key]) == t.data_ptr(), key
        assert np.asarray(params[key]).tobytes() == t.numpy().tobytes(), key
    assert int(params["1.num_batches_tracked"]) == 5
    x = torch.randn(3, 4)
    expected = net(x).detach().numpy()
    assert np.allclose(np.asarray(jax_forward(params, jnp.asarray(x.numpy()))), expected, atol=1e-5)

    back = interop.convert_tree(params, "torch", copy=False)
    assert all(back[k].data_ptr() == state[k].data_ptr() for k in state)
    fresh = model()
    for p in fresh.parameters():
        torch.nn.init.zeros_(p)
    fresh.load_state_dict(back)  # torch copies every converted leaf into its own parameters
    assert np.allclose(fresh(x).detach().numpy(), expected, atol=1e-6)


def test_state_dict_to_numpy_shares_every_leaf():
    state = model().state_dict()
    arrays = interop.convert_tree(state, "numpy", copy=False)
    assert type(arrays) is collections.OrderedDict and list(arrays) == list(state)
    for key, t in state.items():
        assert numpy_address(arrays[key]) == t.data_ptr(), key
        assert arrays[key].sum() == t.numpy().sum(), key


# --- JAX pytrees with registered nodes ---------------------------------------------------------
@jax.tree_util.register_pytree_with_keys_class
class Layer:
    """A pytree node registered with JAX: arrays as children, a name as static data."""

    def __init__(self, w, b, name):
        self.w, self.b, self.name = w, b, name

    def tree_flatten_with_keys(self):
        keys = jax.tree_util.GetAttrKey
        return ((keys("w"), self.w), (keys("b"), self.b)), self.name

    def tree_flatten(self):
        return (self.w, self.b), self.name

    @classmethod
    def tree_unflatten(cls, name, children):
        return cls(*children, name)


def test_jax_pytree_with_a_registered_node_into_torch():
    layers = [Layer(jnp.full((2, 3), float(i)), jnp.arange(3.0) + i, f"l{i}") for i in range(4)]
    tree = {"encoder": {"layers": layers}, "step": 7, "tag": "run-1", "none": None}
    out = interop.convert_tree(tree, "torch", copy=False)
    assert out["step"] is tree["step"] and out["tag"] is tree["tag"] and out["none"] is None
    for before, after in zip(layers, out["encoder"]["layers"], strict=True):
        assert type(after) is Layer and after.name == before.name
        assert after.w.data_ptr() == jax_address(before.w)
        assert after.b.data_ptr() == jax_address(before.b)
        got = (after.w @ after.b).numpy()  # a torch kernel on both leaves
        assert got.tobytes() == np.asarray(before.w @ before.b).tobytes()
    plan = interop.explain_tree(tree, "torch")
    assert plan["['encoder']['layers'][3].w"].status == "shared"
    assert "['encoder']['layers'][3].b" in [leaf.path for leaf in plan.shared]


def test_flax_structs_keep_their_static_fields_as_they_are():
    struct_ = pytest.importorskip("flax.struct")
    frozen = pytest.importorskip("flax.core").FrozenDict

    @struct_.dataclass
    class Params:
        kernel: jax.Array
        scale: jax.Array
        meta: np.ndarray = struct_.field(pytree_node=False)  # static: never converted

    meta = np.arange(3)
    params = frozen({"dense": Params(jnp.ones((3, 3)), jnp.float32(2.0), meta)})
    out = interop.convert_tree(params, "torch")
    dense = out["dense"]
    assert type(out) is frozen and type(dense) is Params and dense.meta is meta
    assert dense.kernel.data_ptr() == jax_address(params["dense"].kernel)
    assert float((dense.kernel * dense.scale).sum()) == 18.0


# --- torch pytree nodes, and the standard containers -----------------------------------------
class Box:
    """A container registered with torch's pytree registry only."""

    def __init__(self, value, label):
        self.value, self.label = value, label


torch.utils._pytree.register_pytree_node(
    Box,
    lambda box: ([box.value], box.label),
    lambda values, label: Box(values[0], label),
    serialized_type_name="test_tree.Box",
    flatten_with_keys_fn=lambda box: (
        [(torch.utils._pytree.GetAttrKey("value"), box.value)],
        box.label,
    ),
)

Pair = collections.namedtuple("Pair", "left right")


@dataclasses.dataclass(frozen=True)
class Frozen:
    weight: typing.Any
    note: str = "frozen"
    derived: int = dataclasses.field(init=False, default=0)

    def __post_init__(self):
        if not isinstance(self.weight, torch.Tensor):
            raise TypeError("__post_init__ must not run again on conversion")


def test_containers_keep_their_types_order_and_other_leaves():
    factory = list
    counts = collections.defaultdict(factory, {"b": torch.ones(2), "a": torch.zeros(2)})
    size = torch.Size([2, 3])
    marker = object()
    tree = collections.OrderedDict(
        z=Pair(torch.arange(3), torch.arange(3.0)),
        y=Frozen(torch.eye(2)),
        x=counts,
        w=collections.deque([torch.ones(1), marker], maxlen=5),
        v=Box(torch.full((2,), 3.0), "boxed"),
        u=(size, 1.5, b"raw", "text"),
    )
    out = interop.convert_tree(tree, "numpy", copy=False)
    assert type(out) is collections.OrderedDict and list(out) == ["z", "y", "x", "w", "v", "u"]
    assert type(out["z"]) is Pair and numpy_address(out["z"].right) == tree["z"].right.data_ptr()
    assert type(out["y"]) is Frozen and out["y"].note == "frozen" and out["y"].derived == 0
    assert (out["y"].weight @ np.ones(2, np.float32)).tolist() == [1.0, 1.0]
    assert type(out["x"]) is collections.defaultdict and out["x"].default_factory is factory
    assert list(out["x"]) == ["b", "a"] and out["x"]["b"].sum() == 2
    assert out["w"].maxlen == 5 and out["w"][1] is marker
    assert type(out["v"]) is Box and out["v"].label == "boxed" and out["v"].value.max() == 3
    assert all(a is b for a, b in zip(out["u"], tree["u"], strict=True))  # torch.Size too
    assert out is not tree and out["x"] is not counts  # fresh containers, inputs untouched
    assert isinstance(counts["b"], torch.Tensor)
    paths = [leaf.path for leaf in interop.explain_tree(tree, "numpy")]
    assert "['v'].value" in paths and "['z'].right" in paths and "['y'].weight" in paths


def test_results_are_freed_when_dropped_without_waiting_for_the_garbage_collector():
    payload = struct.pack("=2f", 1, 2)
    capsule, token = counting_capsule(payload, "float32", (2,))
    gc.disable()
    try:
        out = interop.convert_tree({"c": capsule}, "torch")
        del capsule, out  # no reference cycle holds the result: freed right here
        assert COUNTER.released(token) == 1
    finally:
        gc.enable()


def test_a_leaf_met_twice_is_converted_once_so_ties_survive_copies():
    tied = torch.arange(4.0)
    tree = {"embed": tied, "head": [tied], "other": torch.arange(4.0)}
    shared = interop.convert_tree(tree, "numpy")
    assert shared["embed"] is shared["head"][0]
    copied = interop.convert_tree(tree, "numpy", copy=True)
    assert copied["embed"] is copied["head"][0]
    assert numpy_address(copied["embed"]) != tied.data_ptr()
    copied["embed"][0] = 9  # one copy, seen through both paths
    assert copied["head"][0][0] == 9 and tied[0] == 0
    plan = interop.explain_tree(tree, "numpy")
    assert plan["['head'][0]"].same_as == "['embed']"


# --- tf.data batches ---------------------------------------------------------------------------
def test_tf_data_batch_into_a_torch_step_strings_refused_or_kept():
    tf = pytest.importorskip("tensorflow")
    features = np.arange(32, dtype=np.float32).reshape(8, 4)
    data = tf.data.Dataset.from_tensor_slices(
        {"x": features, "label": np.arange(8), "text": [f"row {i}".encode() for i in range(8)]}
    )
    batch = next(iter(data.batch(4)))
    with pytest.raises(interop.UnsupportedDTypeError, match=r"\['text'\].*string") as info:
        interop.convert_tree(batch, "torch")
    assert [path for path, _ in info.value.failures] == ["['text']"]
    plan = interop.explain_tree(batch, "torch")
    assert [leaf.path for leaf in plan.refused] == ["['text']"] and "['text']" in str(plan)

    out = interop.convert_tree(batch, "torch", unsupported="keep")
    assert out["text"] is batch["text"]
    for key in ("x", "label"):
        where = np.asarray(tf.reshape(batch[key], [-1])).ctypes.data
        assert out[key].data_ptr() == where, key
        assert out[key].numpy().tobytes() == batch[key].numpy().tobytes()
    step = torch.nn.functional.cross_entropy(out["x"], out["label"] % 4)  # a torch step
    assert torch.isfinite(step)


# --- failures: every leaf named, nothing left behind ------------------------------------------
def test_copy_false_names_every_leaf_that_would_need_a_copy():
    read_only = np.arange(4.0)
    read_only.flags.writeable = False
    reversed_ = np.arange(6.0)[::-1]
    tree = {
        "encoder": {"layers": [{"w": np.ones(2)} for _ in range(3)] + [{"w": reversed_}]},
        "frozen": read_only,
        "fine": np.zeros(3),
    }
    with pytest.raises(interop.CopyForbiddenError) as info:
        interop.convert_tree(tree, "torch", copy=False)
    error = info.value
    assert isinstance(error, BufferError)
    assert [path for path, _ in error.failures] == ["['encoder']['layers'][3]['w']", "['frozen']"]
    assert "negative" in str(error) and "read-only" in str(error) and "2 of 6" in str(error)
    plan = interop.explain_tree(tree, "torch", copy=False)
    assert [leaf.path for leaf in plan.refused] == [path for path, _ in error.failures]


def test_a_refusal_releases_every_leaf_already_converted():
    payload = struct.pack("=3f", 1, 2, 3)
    capsule, token = counting_capsule(payload, "float32", (3,))
    buffer = bytearray(payload)
    tree = {"capsule": capsule, "buffer": memoryview(buffer).cast("f"), "bad": np.ones(2)[::-1]}
    with pytest.raises(interop.CopyForbiddenError, match=r"\['bad'\]"):
        interop.convert_tree(tree, "torch", copy=False)
    del tree
    gc.collect()
    assert COUNTER.released(token) == 1  # converted, then released once with the dropped result
    buffer.append(0)  # no export left: the bytearray may move again


def test_plans_and_errors_listing_a_leaf_do_not_keep_its_buffer_exported():
    data = bytearray(16)
    tree = {"frozen": memoryview(data).toreadonly().cast("f")}
    plan = interop.explain_tree(tree, "torch", copy=False)
    with pytest.raises(interop.CopyForbiddenError) as info:
        interop.convert_tree(tree, "torch", copy=False)
    failures = info.value.failures
    del tree, info
    gc.collect()
    data.append(0)  # resizable: neither the plan nor the failures hold the export
    assert plan.refused[0].path == failures[0][0] == "['frozen']"


def test_unsupported_leaves_are_refused_by_path_or_kept_on_request():
    words = np.array(["a", "b"])
    tree = {"ids": np.arange(3), "words": words}
    with pytest.raises(interop.UnsupportedDTypeError, match=r"\['words'\]"):
        interop.convert_tree(tree, "torch")
    out = interop.convert_tree(tree, "torch", unsupported="keep")
    assert out["words"] is words and int(out["ids"].sum()) == 3
    plan = interop.explain_tree(tree, "torch", unsupported="keep")
    assert plan["['words']"].status == "kept" and "unsupported='keep'" in str(plan)
    with pytest.raises(interop.InvalidArgumentError, match="unsupported"):
        interop.convert_tree(tree, "torch", unsupported="skip")


class Registered:
    """A JAX pytree node, registered only after trees have met it as a leaf."""

    def __init__(self, w):
        self.w = w


def test_a_type_registered_after_it_was_met_as_a_leaf_is_taken_apart():
    before = Registered(np.arange(3, dtype=np.float32))
    kept = interop.convert_tree({"r": before}, "torch")
    assert kept["r"] is before and isinstance(before.w, np.ndarray)  # a leaf to JAX so far
    jax.tree_util.register_pytree_node(
        Registered, lambda r: ((r.w,), None), lambda _, children: Registered(*children)
    )
    out = interop.convert_tree({"r": before}, "torch")
    assert type(out["r"]) is Registered and isinstance(out["r"].w, torch.Tensor)
    assert out["r"].w.data_ptr() == numpy_address(before.w) and out["r"].w.sum().item() == 3.0
    with pytest.raises(interop.UnsupportedTensorError, match="convert_tree"):
        interop.convert(before, "torch")  # a registered node is a structure, not a tensor


def test_structures_given_to_the_one_tensor_calls_point_at_convert_tree():
    tree = {"w": torch.ones(2), "meta": {"b": [torch.zeros(1)]}}
    for call in (
        lambda: interop.convert(tree, "numpy"),
        lambda: explain_or_raise(tree, "numpy"),
        lambda: interop.inspect(tree),
        lambda: interop.convert([torch.ones(1)], "numpy"),
    ):
        with pytest.raises(interop.UnsupportedTensorError, match="convert_tree"):
            call()
    with pytest.raises(interop.UnsupportedTensorError, match=r"\['meta'\]\['b'\]\[0\]"):
        interop.convert(tree, "numpy")
    with pytest.raises(interop.UnsupportedTensorError, match="holds no tensors"):
        interop.convert((1, "a"), "numpy")


def test_structure_faults_are_typed_errors():
    loop: list = [np.ones(2)]
    loop.append(loop)
    with pytest.raises(interop.UnsupportedTensorError, match=r"contains itself at \[1\]"):
        interop.convert_tree(loop, "torch")
    with pytest.raises(interop.UnknownFrameworkError):
        interop.convert_tree({"a": 1}, "no-such-framework")
    with pytest.raises(interop.UnknownFrameworkError):
        interop.explain_tree({"a": np.ones(1)}, "no-such-framework")


def test_summary_reads_shared_copied_refused_and_kept():
    read_only = np.arange(3.0)
    read_only.flags.writeable = False
    tree = {"a": np.ones(2), "b": read_only, "c": np.array(["x"]), "n": 3}
    text = str(interop.explain_tree(tree, "torch"))
    first = text.splitlines()[0]
    assert first == (
        "convert_tree -> torch: 3 tensor leaves: 1 shared, 1 copied, 1 refused; "
        "1 other leaves kept as they are"
    )
    assert "['b']: the numpy tensor is read-only" in text and "['c']: UnsupportedDTypeError" in text


def test_trees_import_no_framework():
    code = (
        "import sys, interop\n"
        "tree = {'a': [1, 'x', None], 'b': memoryview(bytearray(8)).cast('f')}\n"
        "print(str(interop.explain_tree(tree, 'numpy')).splitlines()[0])\n"
        "print(sorted(m for m in ('numpy', 'torch', 'jax', 'tensorflow', 'optree')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "1 tensor leaves: 1 shared" in lines[0] and lines[1] == "[]"


# --- leaves handed out fresh, tied by memory, deep structures, keys and options ---------------
class JaxRow:
    """A JAX pytree node over one row of a stored array: its flatten hands out a fresh view
    (`store[i]`) each time, which nothing else keeps alive."""

    def __init__(self, store, i=0):
        self.store, self.i = store, i


jax.tree_util.register_pytree_node(
    JaxRow, lambda r: ((r.store[r.i],), None), lambda _, rows: JaxRow(rows[0][None])
)


class TorchRow(JaxRow):
    """The same node, registered with torch's pytree registry."""


torch.utils._pytree.register_pytree_node(
    TorchRow,
    lambda r: ([r.store[r.i]], None),
    lambda rows, _: TorchRow(rows[0][None]),
    serialized_type_name="test_tree.TorchRow",
)


@pytest.mark.parametrize("node", [JaxRow, TorchRow])
def test_fresh_leaves_of_registered_nodes_each_get_their_own_result(node):
    store = np.arange(10.0).reshape(5, 2)
    tree = [node(store, i) for i in range(5)]
    out = interop.convert_tree(tree, "torch", copy=True)
    assert [type(row) for row in out] == [node] * 5
    assert [row.store[0].tolist() for row in out] == store.tolist()  # not five times row 0
    assert len({row.store.data_ptr() for row in out}) == 5
    assert [float((row.store + 1).sum()) for row in out] == [3.0, 7.0, 11.0, 15.0, 19.0]
    plan = interop.explain_tree(tree, "torch", copy=True)
    assert len(plan.copied) == 5 and [leaf.same_as for leaf in plan] == [None] * 5


class TiedModel(torch.nn.Module):
    """An embedding whose output layer reuses its weight, as language models do."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight
        self.other = torch.nn.Embedding(5, 3)  # same shape and dtype, its own memory


def test_tied_weights_of_a_state_dict_stay_tied_under_copy():
    torch.manual_seed(0)
    state = TiedModel().state_dict()
    weight = state["embed.weight"]
    assert state["head.weight"] is not weight  # state_dict() detaches each entry...
    assert state["head.weight"].data_ptr() == weight.data_ptr()  # ...over one storage
    state["embed.T"] = weight.t()  # the same memory, other strides: not the same data
    state["embed.tail"] = weight[1:]  # the same storage, another first element

    arrays = interop.convert_tree(state, "numpy", copy=True)
    embed, head = arrays["embed.weight"], arrays["head.weight"]
    assert numpy_address(embed) == numpy_address(head) != weight.data_ptr()
    others = {numpy_address(arrays[k]) for k in ("other.weight", "embed.T", "embed.tail")}
    assert len(others) == 3 and numpy_address(embed) not in others
    assert arrays["embed.T"].tobytes() == weight.t().contiguous().numpy().tobytes()
    embed[0, 0] = 42.0  # one copy, seen through both paths; the model is untouched
    assert head[0, 0] == 42.0 and float(weight[0, 0]) != 42.0

    params = interop.convert_tree(state, "jax", copy=True)
    assert jax_address(params["embed.weight"]) == jax_address(params["head.weight"])
    assert jax_address(params["embed.weight"]) != jax_address(params["other.weight"])
    assert float((params["head.weight"] + 1).sum()) == pytest.approx(float(weight.sum()) + 15)

    plan = interop.explain_tree(state, "numpy", copy=True)
    assert plan["['head.weight']"].same_as == "['embed.weight']"
    assert [plan[f"['{k}']"].same_as for k in ("other.weight", "embed.T", "embed.tail")] == [
        None,
        None,
        None,
    ]
    assert len(plan.copied) == 5


def nested(depth: int, bottom):
    """`bottom` under `depth` levels of {"a": [child, level]}."""
    tree = bottom
    for level in range(depth):
        tree = {"a": [tree, level]}
    return tree


DEEP = 5000
BOTTOM = "['a'][0]" * DEEP


def test_structures_thousands_of_levels_deep_convert_and_explain():
    bottom = np.arange(3.0)
    out = interop.convert_tree(nested(DEEP, bottom), "torch")
    for level in reversed(range(DEEP)):
        assert out["a"][1] == level
        out = out["a"][0]
    assert out.data_ptr() == numpy_address(bottom) and float((out + 1).sum()) == 6.0
    plan = interop.explain_tree(nested(DEEP, bottom), "torch")
    assert [leaf.path for leaf in plan.shared] == [BOTTOM] and len(plan.kept) == DEEP

    words = np.array(["deep"])
    with pytest.raises(interop.UnsupportedDTypeError) as info:
        interop.convert_tree(nested(DEEP, words), "torch")
    assert [path for path, _ in info.value.failures] == [BOTTOM]
    plan = interop.explain_tree(nested(DEEP, words), "torch")
    assert [leaf.path for leaf in plan.refused] == [BOTTOM]

    loop: list = [np.ones(2)]
    loop.append(loop)
    with pytest.raises(interop.UnsupportedTensorError, match="contains itself") as info:
        interop.convert_tree(nested(DEEP, loop), "torch")
    assert str(info.value).endswith(f"at {BOTTOM}[1]")


class Grows:
    """A DLPack producer whose export adds a key to the dict holding it."""

    def __init__(self, parent: dict, array):
        self.parent, self.array = parent, array

    def __dlpack__(self, **kwargs):
        self.parent[f"added{len(self.parent)}"] = 0
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_a_dict_changed_while_it_is_walked_is_named_by_path():
    inner: dict = {}
    inner["p"] = Grows(inner, np.arange(3.0))
    inner["q"] = np.ones(2)
    with pytest.raises(interop.UnsupportedTensorError, match="changed size") as info:
        interop.convert_tree({"outer": inner}, "numpy")
    assert [path for path, _ in info.value.failures] == ["['outer']"]
    assert "dict at ['outer']" in str(info.value) and "copy" in str(info.value)


class Opaque:
    """A dict key whose repr raises."""

    def __repr__(self):
        raise RuntimeError("no repr")


def test_a_key_that_cannot_be_printed_does_not_hide_the_failing_leaf():
    tree = {"ok": np.ones(2), Opaque(): np.array(["s"])}
    with pytest.raises(interop.UnsupportedDTypeError, match="<U1") as info:
        interop.convert_tree(tree, "torch")
    assert [path for path, _ in info.value.failures] == ["[<Opaque key #1>]"]
    plan = interop.explain_tree(tree, "torch")
    assert [leaf.path for leaf in plan.refused] == ["[<Opaque key #1>]"]
    assert float(interop.convert_tree({"ok": tree["ok"]}, "torch")["ok"].sum()) == 2.0
    assert plan["['ok']"].status == "shared"


@pytest.mark.parametrize("call", [interop.convert_tree, interop.explain_tree])
def test_tree_options_are_checked_before_any_leaf(call):
    for value in ("KEEP", None, 1, ["keep"]):
        with pytest.raises(interop.InvalidArgumentError, match="'raise'.*'keep'"):
            call({"a": np.ones(1)}, "torch", unsupported=value)
    with pytest.raises(interop.InvalidArgumentError, match="copy must be None, True or False"):
        call({"n": 1}, "torch", copy="yes")  # no tensor to refuse it later
    with pytest.raises(interop.DeviceError, match="nowhere"):
        call({"n": 1}, "torch", device="nowhere")


# --- tree nodes come from adapters: JAX's and torch's, and a plugin's ------------------------
def test_the_pytree_registries_are_the_adapters_tree_nodes():
    # the core names no framework: JAX's registry reaches it through the jax adapter's hook,
    # torch's through torch's; each knows only its own registry's nodes
    from interop.registry import REGISTRY

    jax_node, torch_node = (REGISTRY.get(name).tree_node() for name in ("jax", "torch"))
    assert REGISTRY.get("jax").tree_node() is jax_node and callable(torch_node)
    layer, box = Layer(jnp.ones(2), jnp.zeros(2), "l"), Box(torch.ones(2), "b")
    keys, children, rebuild = jax_node(layer)
    assert keys == [".w", ".b"] and children[0] is layer.w and rebuild(children).name == "l"
    keys, children, rebuild = torch_node(box)
    assert keys == [".value"] and children == [box.value] and rebuild(children).label == "b"
    assert jax_node(box) is None and torch_node(layer) is None
    for leaf in (jnp.ones(2), torch.ones(2), object()):
        assert jax_node(leaf) is None and torch_node(leaf) is None


def test_a_registered_node_left_unchanged_is_returned_as_it_is():
    layer, box = Layer(1, 2, "l"), Box("text", "b")
    assert interop.convert_tree(layer, "torch") is layer
    assert interop.convert_tree(box, "jax") is box
    torch_box = interop.convert_tree(Box(np.arange(3.0), "n"), "torch")
    assert type(torch_box) is Box and torch_box.label == "n"
    assert float((torch_box.value * 2).sum()) == 6.0  # a torch kernel on the leaf


class Both:
    """Registered with JAX's registry and torch's: adapters are asked by name, JAX first."""

    def __init__(self, a):
        self.a = a


jax.tree_util.register_pytree_with_keys(
    Both,
    lambda x: (((jax.tree_util.GetAttrKey("a"), x.a),), None),
    lambda _, children: Both(*children),
)
torch.utils._pytree.register_pytree_node(
    Both, lambda x: ([x.a], None), lambda values, _: Both(*values), serialized_type_name="Both"
)


def test_a_node_both_registries_know_is_taken_apart_by_jaxs():
    plan = interop.explain_tree([Both(np.ones(2))], "torch")
    assert [leaf.path for leaf in plan] == ["[0].a"]  # torch's, without keys, says "[0][0]"


@jax.tree_util.register_pytree_node_class
class Unflattenable:
    """A JAX-registered node whose flatten fails: the user's class, not the core, is at fault."""

    def tree_flatten(self):
        raise ValueError("cannot flatten me")

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls()


def test_a_registry_that_fails_is_a_typed_error_naming_the_adapter_and_the_path():
    tree = {"ok": np.ones(2), "bad": [Unflattenable()]}
    for call in (interop.convert_tree, interop.explain_tree):
        with pytest.raises(interop.UnsupportedTensorError) as info:
            call(tree, "torch")
        said = str(info.value)
        assert "['bad'][0]" in said and "jax adapter's tree node" in said
        assert "cannot flatten me" in said


def run_script(code: str) -> typing.Any:
    """The JSON a script prints last, run in a fresh interpreter: adapters it registers are
    seen by no other test."""
    import json

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


TREE_PLUGIN = """
import dataclasses, json, sys, types
import numpy as np
import interop

sys.modules["treefw"] = types.ModuleType("treefw")  # a framework that only a plugin knows
ASKED = []


class Tensor:  # treefw's tensors (none are made here)
    __module__ = "treefw"


class Bag:  # treefw's container: named items, and a label that is not a child
    __module__ = "treefw"

    def __init__(self, label, **items):
        self.label, self.items = label, items


@dataclasses.dataclass
class Record:  # a dataclass treefw's registry knows: only `data` is a child
    data: object
    cache: object = None


def node(x):
    ASKED.append(type(x).__name__)
    if type(x) is Bag:
        if x.label == "broken":
            raise RuntimeError("treefw cannot open this bag")
        if x.label == "odd":
            return [".a"], [], lambda values: x
        keys = list(x.items)
        return (
            [f".{k}" for k in keys],
            [x.items[k] for k in keys],
            lambda values: Bag(x.label, **dict(zip(keys, values))),
        )
    if type(x) is Record:
        return [".data"], [x.data], lambda values: Record(values[0], "rebuilt")
    return None


class TreeFw(interop.Adapter):
    name, modules, contract = "treefw", ("treefw",), (1, 1)
    tensor_types = lambda self: (Tensor,)
    capabilities = lambda self: interop.Capabilities(frozenset(), frozenset())
    tree_node = lambda self: node


interop.register(TreeFw())
out = {}
w, v = np.ones(2), np.arange(3.0)
tree = {"b": Bag("outer", w=w, n=3, inner=Bag("inner", v=v)), "r": Record(v, "old")}
got = interop.convert_tree(tree, "numpy", copy=True)
b = got["b"]
out["types"] = [type(b).__name__, b.label, type(b.items["inner"]).__name__, b.items["n"]]
out["copied"] = [
    bool((b.items["w"] == w).all()) and b.items["w"] is not w,
    float(b.items["inner"].items["v"].sum()),
    got["r"].cache,
    got["r"].data is b.items["inner"].items["v"],  # one leaf met twice: converted once
]
out["paths"] = [leaf.path for leaf in interop.explain_tree(tree, "numpy")]
same = Bag("same", n=1, s="x")
out["unchanged"] = interop.convert_tree(same, "numpy") is same
try:
    interop.convert_tree({"x": [Bag("outer", n=1, bad=w)]}, "treefw")  # it imports no dtype
except interop.InteropError as exc:
    out["leaf error"] = [type(exc).__name__, [p for p, _ in exc.failures]]
for label in ("broken", "odd"):
    try:
        interop.convert_tree({"x": [Bag(label)]}, "numpy")
    except interop.InteropError as exc:
        out[label] = [type(exc).__name__, str(exc)]
    try:
        interop.explain_tree({"x": [Bag(label)]}, "numpy")
    except interop.InteropError as exc:
        out[label + " explained"] = type(exc).__name__

# not asked while treefw is not imported, and a "no" is not remembered
class Later:
    __module__ = "treefw"

later = Later()
del sys.modules["treefw"]
ASKED.clear()
kept = interop.convert_tree({"l": later}, "numpy")
out["not imported"] = [list(ASKED), kept["l"] is later]
sys.modules["treefw"] = types.ModuleType("treefw")
out["imported again"] = [interop.convert_tree(later, "numpy") is later, ASKED.count("Later")]
interop.convert_tree(later, "numpy")
out["asked again"] = ASKED.count("Later")
out["frameworks"] = sorted({"jax", "torch"} & set(sys.modules))
print(json.dumps(out))
"""


def test_a_plugin_brings_the_tree_nodes_of_its_own_framework():
    got = run_script(TREE_PLUGIN)
    assert got["types"] == ["Bag", "outer", "Bag", 3]
    assert got["copied"] == [True, 3.0, "rebuilt", True]
    assert got["paths"] == ["['b'].w", "['b'].n", "['b'].inner.v", "['r'].data"]
    assert got["unchanged"] is True
    assert got["leaf error"][1] == ["['x'][0].bad"]  # the failing leaf, by the plugin's path
    kind, said = got["broken"]
    assert kind == "UnsupportedTensorError" and "['x'][0]" in said
    assert "treefw adapter's tree node failed" in said and "cannot open this bag" in said
    kind, said = got["odd"]
    assert kind == "UnsupportedTensorError" and "1 keys for 0 children" in said
    assert got["broken explained"] == got["odd explained"] == "UnsupportedTensorError"
    # the core asks no adapter whose framework is not imported, and asks again once it is
    assert got["not imported"] == [[], True]
    assert got["imported again"] == [True, 1] and got["asked again"] == 2
    assert got["frameworks"] == []


def test_adapters_without_a_working_tree_node_hook():
    got = run_script(
        """
import dataclasses, json, sys, types
import numpy as np
import interop

for name in ("olderfw", "failingfw", "wrongfw"):
    sys.modules[name] = types.ModuleType(name)


class Base(interop.Adapter):
    contract = (1, 1)
    tensor_types = lambda self: ()
    capabilities = lambda self: interop.Capabilities(frozenset(), frozenset())


class Older(Base):  # written for contract 1.0: no hook, converts trees as before
    name, modules, contract = "olderfw", ("olderfw",), (1, 0)


@dataclasses.dataclass
class Point:
    x: object


out = {}
interop.register(Older())
got = interop.convert_tree({"p": Point(np.ones(2))}, "numpy", copy=True)
out["older"] = [type(got["p"]).__name__, float(got["p"].x.sum())]


class Failing(Base):  # its hook is broken: the plugin's fault, said as such
    name, modules = "failingfw", ("failingfw",)

    def tree_node(self):
        raise ImportError("no module named failingfw_tree")


class Wrong(Base):  # its hook gives no function
    name, modules = "wrongfw", ("wrongfw",)
    tree_node = lambda self: "not a function"


for adapter in (Failing(), Wrong()):
    interop.register(adapter)
    for call in (interop.convert_tree, interop.explain_tree):
        try:
            call({"p": Point(np.ones(2))}, "numpy")
            out.setdefault(adapter.name, []).append("no error")
        except interop.AdapterError as exc:
            out.setdefault(adapter.name, []).append(str(exc))
    del sys.modules[adapter.name]  # its framework gone: it is not asked
    out[adapter.name + " gone"] = type(interop.convert_tree(Point(1), "numpy")).__name__
print(json.dumps(out))
"""
    )
    assert got["older"] == ["Point", 2.0]
    for name, said in (("failingfw", "no module named"), ("wrongfw", "not a function")):
        assert len(got[name]) == 2, got[name]
        for message in got[name]:
            assert f"the {name} adapter's tree_node()" in message and said in message
        assert got[name + " gone"] == "Point"


def test_the_kits_check_of_the_tree_node_hook_can_fail():
    got = run_script(
        """
import json
import interop
from interop.roles import PytreeNodes
from interop.testing.suite import tree_node_hook
from interop_numpy import NumpyAdapter


def greedy(x):  # takes everything apart, its own arrays too
    return [], [], lambda values: x


class Greedy(NumpyAdapter, PytreeNodes):
    name, aliases = "greedyfw", ()
    tree_node = lambda self: greedy


class Fickle(NumpyAdapter, PytreeNodes):
    name, aliases = "ficklefw", ()
    tree_node = lambda self: lambda x: None  # a new function each time


class Fine(NumpyAdapter, PytreeNodes):
    name, aliases = "finefw", ()
    tree_node = lambda self: FINE


FINE = lambda x: None
out = []
for adapter in (Fine(), Greedy(), Fickle()):
    interop.register(adapter)
    try:
        tree_node_hook(adapter.name)
    except AssertionError as exc:
        out.append(str(exc))
    else:
        out.append("passed")
print(json.dumps(out))
"""
    )
    assert got[0] == "passed", got  # the same check passes a hook that keeps the contract
    assert "greedyfw's tree node takes its own ndarray apart" in got[1], got
    assert "ficklefw's tree_node() must return the same function" in got[2], got


def test_a_jax_node_is_taken_apart_before_any_jax_tensor_was_converted():
    # JAX imported, its adapter not loaded yet: the tree loads it to ask its registry
    got = run_script(
        """
import json, sys
import jax, numpy as np
import interop
from interop.registry import REGISTRY


@jax.tree_util.register_pytree_with_keys_class
class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def tree_flatten_with_keys(self):
        key = jax.tree_util.GetAttrKey
        return ((key("a"), self.a), (key("b"), self.b)), None

    def tree_flatten(self):
        return (self.a, self.b), None

    @classmethod
    def tree_unflatten(cls, _, children):
        return cls(*children)


before = sorted(r.name for r in REGISTRY._discover().values() if r.adapter is not None)
a = np.arange(3.0)
out = interop.convert_tree({"p": Pair(a, 2)}, "numpy", copy=True)["p"]
paths = [leaf.path for leaf in interop.explain_tree({"p": Pair(a, 2)}, "numpy")]
print(json.dumps([before, type(out).__name__, out.a is not a, float(out.a.sum()), paths,
                  "torch" in sys.modules]))
"""
    )
    before, kind, fresh, total, paths, torch_imported = got
    assert "jax" not in before and kind == "Pair" and fresh and total == 3.0
    assert paths == ["['p'].a", "['p'].b"] and not torch_imported
