"""A wrapped function under `jax.jit` as an XLA FFI custom call (interop_jax.xla_ffi).

With the compiled accelerator on and the extension built, traced calls lower to the custom call
`interop_jax_bridge`, not to a host callback; with INTEROP_PURE_PYTHON=1, to
`jax.pure_callback`. The oracle is JAX's own autodiff of the same math written in JAX. Cases
that could abort a process (a failure inside the handler, the other path) run in a subprocess.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import interop

np = pytest.importorskip("numpy")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
torch = pytest.importorskip("torch")
xla_ffi = pytest.importorskip("interop_jax.xla_ffi")

REQUIRED = os.environ.get("INTEROP_REQUIRE_SPEEDUPS") == "1"
PURE = os.environ.get("INTEROP_PURE_PYTHON", "").strip() not in ("", "0")
ADAPTER = Path(xla_ffi.__file__).parent


def ffi_on() -> bool:
    return bool(xla_ffi.active())


# Where the build must have compiled it (CI), these tests fail instead of skipping.
needs_ffi = pytest.mark.skipif(
    not REQUIRED and not ffi_on(), reason=f"the FFI path is not in use: {xla_ffi.WHY}"
)


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
    )


def torch_loss(w: Any, x: Any) -> Any:
    return (torch.tanh(x @ w) ** 2).sum()


def jax_loss(w: Any, x: Any) -> Any:
    return (jnp.tanh(x @ w) ** 2).sum()


def data(dtype: Any = np.float32) -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.normal(size=(4, 3)).astype(dtype)), jnp.asarray(
        rng.normal(size=(5, 4)).astype(dtype)
    )


@pytest.mark.skipif(not REQUIRED, reason="only where the build must have compiled it (CI)")
def test_the_ffi_extension_is_built_and_used_where_required() -> None:
    assert importlib.util.find_spec("interop_jax._xla_ffi") is not None
    assert ffi_on(), xla_ffi.WHY
    assert xla_ffi.PATH == "xla_ffi"


@needs_ffi
def test_jit_grad_lowers_to_the_ffi_target_and_no_callback() -> None:
    assert ffi_on(), xla_ffi.WHY
    step = jax.jit(jax.value_and_grad(interop.wrap(torch_loss, "torch", "jax")))
    text = step.lower(*data()).as_text()
    assert xla_ffi.TARGET in text
    assert "callback" not in text.lower()


def test_without_the_accelerator_jit_lowers_to_a_host_callback() -> None:
    done = run_python(
        f"""
        import jax, jax.numpy as jnp, torch, interop
        from interop_jax import xla_ffi
        f = interop.wrap(lambda x: (torch.sin(x) * x).sum(), "torch", "jax")
        text = jax.jit(jax.grad(f)).lower(jnp.ones(3)).as_text()
        assert not xla_ffi.active() and xla_ffi.PATH == "pure_callback", xla_ffi.PATH
        assert "callback" in text and {xla_ffi.TARGET!r} not in text
        assert "INTEROP_PURE_PYTHON" in xla_ffi.WHY, xla_ffi.WHY
        print("ok")
        """,
        INTEROP_PURE_PYTHON="1",
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("dtype", [np.float32])
def test_jit_value_and_grad_equal_native_jax(dtype: Any) -> None:
    w, x = data(dtype)
    got = jax.jit(jax.value_and_grad(interop.wrap(torch_loss, "torch", "jax"), (0, 1)))(w, x)
    want = jax.jit(jax.value_and_grad(jax_loss, (0, 1)))(w, x)
    for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(np.asarray(g + 0), np.asarray(e), rtol=2e-5, atol=1e-6)


def test_a_function_writing_into_its_inputs_under_jit_leaves_xlas_buffers_alone() -> None:
    # Inputs the bridge copied out of XLA's buffers reach torch uncopied where no gradient is
    # recorded for them: a write lands in the bridge's copy, never in XLA's buffer.
    def writer(w: Any, x: Any) -> Any:
        x.mul_(0.5)  # not differentiated: the bridge's own copy
        w.mul_(0.25)  # differentiated: torch's own clone of the leaf
        return (torch.tanh(x @ w) ** 2).sum()

    def native(w: Any, x: Any) -> Any:
        return (jnp.tanh((0.5 * x) @ (0.25 * w)) ** 2).sum()

    w, x = data()
    before = (np.array(w), np.array(x))
    bridged = interop.wrap(writer, "torch", "jax")
    both = jax.jit(lambda w, x: (bridged(w, x), jax.value_and_grad(bridged)(w, x), x * 1, w * 1))
    value, (again, grad), x_after, w_after = both(w, x)
    want_value, want_grad = jax.value_and_grad(native)(w, x)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(again, want_value, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(x_after, before[1])  # XLA's buffers, read back after
    np.testing.assert_array_equal(w_after, before[0])
    np.testing.assert_array_equal(np.asarray(x), before[1])
    np.testing.assert_array_equal(np.asarray(w), before[0])


def test_float64_with_x64_equals_native_jax_and_second_order_works() -> None:
    done = run_python(
        """
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp, numpy as np, torch, interop
        rng = np.random.default_rng(1)
        w, x = jnp.asarray(rng.normal(size=(4, 3))), jnp.asarray(rng.normal(size=(5, 4)))
        f = interop.wrap(lambda w, x: (torch.tanh(x @ w) ** 2).sum(), "torch", "jax")
        g = lambda w, x: (jnp.tanh(x @ w) ** 2).sum()
        got = jax.jit(jax.value_and_grad(f))(w, x)
        want = jax.jit(jax.value_and_grad(g))(w, x)
        assert got[1].dtype == jnp.float64
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        hvp = lambda h: jax.jit(jax.grad(lambda w: jnp.vdot(jax.grad(h)(w, x), w)))(w)
        np.testing.assert_allclose(hvp(f), hvp(g), rtol=1e-10)
        from interop_jax import xla_ffi
        print("ok", xla_ffi.PATH)
        """
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
    assert ("ok xla_ffi" in done.stdout) == (not PURE and ffi_on())


def test_vmap_under_jit_runs_once_per_element() -> None:
    calls = []

    def counted(x: Any) -> Any:
        calls.append(tuple(x.shape))
        return torch.sin(x) * 2

    bridged = interop.wrap(counted, "torch", "jax", out_spec=lambda x: x)
    xs = jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4)
    got = jax.jit(jax.vmap(bridged))(xs)
    np.testing.assert_allclose(np.asarray(got + 0), np.asarray(jnp.sin(xs) * 2), rtol=1e-6)
    grad = jax.jit(jax.grad(lambda xs: jax.vmap(bridged)(xs).sum()))(xs)
    np.testing.assert_allclose(np.asarray(grad + 0), np.asarray(2 * jnp.cos(xs)), rtol=1e-6)
    assert calls.count((4,)) >= 6  # three forward, three backward (and no batched call)


def test_bfloat16_and_integer_outputs_under_jit() -> None:
    x = jnp.arange(6, dtype=jnp.bfloat16)
    got = jax.jit(interop.wrap(lambda x: x * 2, "torch", "jax"))(x)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray((got + 0).astype(jnp.float32)), np.arange(6) * 2.0)
    n = jnp.arange(5, dtype=jnp.int32)
    got_n = jax.jit(interop.wrap(lambda n: (n * 3, n > 2), "torch", "jax"))(n)
    np.testing.assert_array_equal(np.asarray(got_n[0] + 0), np.arange(5) * 3)
    np.testing.assert_array_equal(np.asarray(got_n[1] & True), np.arange(5) > 2)


def test_a_wrapped_tensorflow_function_under_jit() -> None:
    tf = pytest.importorskip("tensorflow")
    f = interop.wrap(lambda w, x: tf.reduce_sum(tf.tanh(x @ w) ** 2), "tensorflow", "jax")
    w, x = data()
    got = jax.jit(jax.value_and_grad(f))(w, x)
    want = jax.jit(jax.value_and_grad(jax_loss))(w, x)
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1] + 0), np.asarray(want[1]), rtol=1e-5, atol=1e-6)


def test_a_failure_inside_the_handler_is_a_catchable_error() -> None:
    done = run_python(
        """
        import jax, jax.numpy as jnp, torch, interop
        from interop.grad import BridgedFunctionError
        from interop_jax import xla_ffi

        def refuses_negatives(x):
            if (x < 0).any():
                raise ValueError("negative input")
            return x * 2

        f = jax.jit(interop.wrap(refuses_negatives, "torch", "jax", out_spec=lambda x: x))
        assert float(f(jnp.ones(2)).sum()) == 4.0
        for _ in range(2):  # the process goes on after a failure
            try:
                f(-jnp.ones(2)).block_until_ready()
            except Exception as exc:
                message = str(exc)
            else:
                raise AssertionError("no error")
            assert "BridgedFunctionError" in message, message
            assert "refuses_negatives raised ValueError in torch: negative input" in message
        if xla_ffi.PATH == "xla_ffi":
            assert isinstance(xla_ffi.last_error(), BridgedFunctionError)
        # a wrong announced spec is refused the same way, naming the spec
        g = jax.jit(interop.wrap(lambda x: x[:1], "torch", "jax", out_spec=lambda x: x))
        try:
            g(jnp.ones(2)).block_until_ready()
        except Exception as exc:
            assert "OutSpecError" in str(exc), str(exc)
        else:
            raise AssertionError("no error")
        assert float(f(jnp.ones(2)).sum()) == 4.0
        print("ok", xla_ffi.PATH)
        """
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


@needs_ffi
def test_a_freed_bridge_frees_its_table_entries() -> None:
    assert ffi_on(), xla_ffi.WHY
    jax.clear_caches()
    gc.collect()  # what earlier tests left unreachable goes first
    before = xla_ffi.entries()
    f = interop.wrap(lambda x: (torch.sin(x) * x).sum(), "torch", "jax")
    step = jax.jit(jax.value_and_grad(f))
    step(jnp.ones(3)), step(jnp.ones(4))
    # one key per bridge and output specs: the forward's () output, the gradient's (3,), (4,)
    assert xla_ffi.entries() == before + 3
    del f, step
    jax.clear_caches()
    gc.collect()
    assert xla_ffi.entries() == before


def test_the_mirrored_ffi_structs_match_jaxlibs_header(tmp_path: Path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    try:
        include = jax.ffi.include_dir()
    except AttributeError:
        pytest.skip("this jax has no jax.ffi.include_dir")
    if not (Path(include) / "xla/ffi/api/c_api.h").exists():
        pytest.skip("jaxlib ships no xla/ffi/api/c_api.h")
    same_struct = {
        "IX_ExtensionBase": ("XLA_FFI_Extension_Base", ["struct_size", "type", "next"]),
        "IX_ApiVersion": (
            "XLA_FFI_Api_Version",
            ["struct_size", "extension_start", "major_version", "minor_version"],
        ),
        "IX_ErrorCreateArgs": (
            "XLA_FFI_Error_Create_Args",
            ["struct_size", "extension_start", "message", "errc"],
        ),
        "IX_Buffer": (
            "XLA_FFI_Buffer",
            ["struct_size", "extension_start", "dtype", "data", "rank", "dims"],
        ),
        "IX_ByteSpan": ("XLA_FFI_ByteSpan", ["ptr", "len"]),
        "IX_Scalar": ("XLA_FFI_Scalar", ["dtype", "value"]),
        "IX_Args": ("XLA_FFI_Args", ["struct_size", "extension_start", "size", "types", "args"]),
        "IX_Rets": ("XLA_FFI_Rets", ["struct_size", "extension_start", "size", "types", "rets"]),
        "IX_Attrs": (
            "XLA_FFI_Attrs",
            ["struct_size", "extension_start", "size", "types", "names", "attrs"],
        ),
        "IX_CallFrame": (
            "XLA_FFI_CallFrame",
            ["struct_size", "extension_start", "api", "ctx", "stage", "args", "rets", "attrs"],
        ),
        "IX_Metadata": ("XLA_FFI_Metadata", ["struct_size", "api_version", "traits"]),
        "IX_MetadataExtension": ("XLA_FFI_Metadata_Extension", ["extension_base", "metadata"]),
    }
    checks = []
    for ours, (theirs, fields) in same_struct.items():
        for field in fields:
            checks.append(f"offsetof({ours}, {field}) == offsetof({theirs}, {field})")
            checks.append(f"sizeof((({ours} *)0)->{field}) == sizeof((({theirs} *)0)->{field})")
    for ours, theirs in {
        "IX_EXTENSION_METADATA": "XLA_FFI_Extension_Metadata",
        "IX_ERROR_CODE_INTERNAL": "XLA_FFI_Error_Code_INTERNAL",
        "IX_DTYPE_S64": "XLA_FFI_DataType_S64",
        "IX_ARG_BUFFER": "XLA_FFI_ArgType_BUFFER",
        "IX_RET_BUFFER": "XLA_FFI_RetType_BUFFER",
        "IX_ATTR_SCALAR": "XLA_FFI_AttrType_SCALAR",
        "IX_STAGE_EXECUTE": "XLA_FFI_ExecutionStage_EXECUTE",
        "IX_API_MAJOR": "XLA_FFI_API_MAJOR",
        "sizeof(IX_HandlerTraits)": "sizeof(XLA_FFI_Handler_Traits)",
        "sizeof(int32_t)": "sizeof(XLA_FFI_DataType)",
        "offsetof(IX_Api, error_create)": "offsetof(XLA_FFI_Api, XLA_FFI_Error_Create)",
    }.items():
        checks.append(f"{ours} == {theirs}")
    checks.append("IX_API_MINOR <= XLA_FFI_API_MINOR")
    xla_names = {"bool": "PRED", "bfloat16": "BF16", "complex64": "C64", "complex128": "C128"}
    for kind, letter in (("int", "S"), ("uint", "U"), ("float", "F")):
        xla_names.update({f"{kind}{bits}": f"{letter}{bits}" for bits in (8, 16, 32, 64)})
    for name in "e5m2 e4m3fn e4m3b11fnuz e5m2fnuz e4m3fnuz e4m3 e3m4 e8m0fnu".split():
        xla_names[f"float8_{name}"] = f"F8{name.upper()}"
    for code, dtype in xla_ffi._dtype_codes().items():  # the Python side's table
        checks.append(f"XLA_FFI_DataType_{xla_names[dtype.name]} == {code}")
    source = tmp_path / "layout.c"
    source.write_text(
        '#include "xla/ffi/api/c_api.h"\n#include "_xla_ffi_abi.h"\n'
        + "".join(f'_Static_assert({c}, "{c}");\n' for c in checks)
    )
    done = subprocess.run(
        [gcc, "-fsyntax-only", "-std=c11", f"-I{include}", f"-I{ADAPTER}", str(source)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@needs_ffi
def test_the_backward_reuses_the_forwards_graph_under_jit() -> None:
    """One torch forward per jitted step (the backward pulls the kept graph), gradients equal
    JAX's own; a forward whose backward never runs is dropped from the bounded stash."""
    calls = [0]

    def counted(w: Any, x: Any) -> Any:
        calls[0] += 1
        return torch_loss(w, x)

    w, x = data()
    f = interop.wrap(counted, "torch", "jax")
    step = jax.jit(jax.value_and_grad(f))
    want = jax.value_and_grad(jax_loss)(w, x)
    step(w, x)  # traces (finding shapes calls the function on fake tensors)
    before = calls[0]
    for _ in range(3):
        got = step(w, x)
    assert calls[0] - before == 3  # one forward a step, none in the backward
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    assert xla_ffi.stashed() == 0
    forward_only = jax.jit(lambda w, x: jax.vjp(f, w, x)[0])  # the pullback is never called
    for _ in range(xla_ffi.STASH_SIZE + 3):
        np.testing.assert_allclose(forward_only(w, x), want[0], rtol=1e-5)
    assert xla_ffi.stashed() <= xla_ffi.STASH_SIZE
    batched = jax.jit(jax.vmap(jax.grad(f), in_axes=(None, 0)))(w, jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(batched[1], jax.grad(jax_loss)(w, 2 * x), rtol=1e-5, atol=1e-6)


# -- compiled functions outlive the interop.wrap objects they were traced with ------------------


def test_a_jitted_gradient_keeps_a_wrap_made_while_tracing_alive() -> None:
    """The wrap made inside the traced function is unreachable once tracing ends: the
    executable keeps its bridge (as JAX keeps a host callback's function)."""

    def loss(w: Any, x: Any) -> Any:
        return interop.wrap(torch_loss, "torch", "jax")(w, x)

    w, x = data()
    step = jax.jit(jax.grad(loss))
    want = jax.grad(jax_loss)(w, x)
    for _ in range(3):
        np.testing.assert_allclose(step(w, x), want, rtol=1e-5, atol=1e-6)
        gc.collect()


def test_a_jitted_gradient_survives_its_bridge_leaving_the_wraps_cache() -> None:
    scaled = interop.wrap(lambda w, x, c: torch_loss(w, x) * c, "torch", "jax")
    w, x = data()
    step = jax.jit(jax.grad(lambda w, x: scaled(w, x, 2.0)))
    want = 2 * jax.grad(jax_loss)(w, x)
    np.testing.assert_allclose(step(w, x), want, rtol=1e-5, atol=1e-6)
    for c in range(interop.grad.MAX_BRIDGES + 44):  # other constants: other bridges, eagerly
        scaled(w, x, float(c) + 3.0)
    gc.collect()
    np.testing.assert_allclose(step(w, x), want, rtol=1e-5, atol=1e-6)


def test_an_ahead_of_time_compiled_function_keeps_its_bridge() -> None:
    bridged = interop.wrap(torch_loss, "torch", "jax")
    w, x = data()
    compiled = jax.jit(jax.value_and_grad(bridged)).lower(w, x).compile()
    del bridged
    gc.collect()
    value, grad = compiled(w, x)
    want = jax.value_and_grad(jax_loss)(w, x)
    np.testing.assert_allclose(value, want[0], rtol=1e-5)
    np.testing.assert_allclose(grad, want[1], rtol=1e-5, atol=1e-6)


def test_a_custom_call_naming_no_live_bridge_is_a_typed_refusal() -> None:
    """What a serialized executable met in another process would find: a key of no bridge
    here."""
    key = max(xla_ffi._ENTRIES, default=0) + 7
    with pytest.raises(interop.grad.UnsupportedTransformError, match="does not hold"):
        xla_ffi._run(key, (), ())


def test_exporting_a_bridged_function_is_refused() -> None:
    """The exported computation could not carry the Python function: ours refuses with our
    typed error (a NotImplementedError), the pure twin's host callback with JAX's own."""
    bridged = interop.wrap(torch_loss, "torch", "jax")
    checks = [jax.export.DisabledSafetyCheck.custom_call(xla_ffi.TARGET)]
    with pytest.raises(NotImplementedError) as refused:
        jax.export.export(jax.jit(jax.grad(bridged)), disabled_checks=checks)(*data())
    if ffi_on():
        assert isinstance(refused.value, interop.grad.UnsupportedTransformError)
        assert "jax.export cannot carry a function bridged from torch" in str(refused.value)


# -- transformations applied outside the jit ---------------------------------------------------


def torch_cube(x: Any) -> Any:
    return (torch.sin(x) ** 3).sum()


def jax_cube(x: Any) -> Any:
    return (jnp.sin(x) ** 3).sum()


OUTSIDE = {
    "grad(jit(grad))": lambda f: jax.grad(lambda x: jax.jit(jax.grad(f))(x).sum()),
    "jacrev(jit(jacrev))": lambda f: jax.jacrev(jax.jit(jax.jacrev(f))),
    "grad(remat(jit(grad)))": lambda f: jax.grad(
        lambda x: jax.checkpoint(jax.jit(jax.grad(f)))(x).sum()
    ),
    "vmap(grad(jit(grad)))": lambda f: jax.vmap(jax.grad(lambda x: jax.jit(jax.grad(f))(x).sum())),
    "jit(grad(jit(grad)))": lambda f: jax.jit(jax.grad(lambda x: jax.jit(jax.grad(f))(x).sum())),
    "grad(jit(value_and_grad)[1])": lambda f: jax.grad(
        lambda x: jax.jit(jax.value_and_grad(f))(x)[1].sum()
    ),
}


@pytest.mark.parametrize("name", list(OUTSIDE))
def test_a_transformation_outside_the_jit_equals_native_jax(name: str) -> None:
    x = jnp.linspace(0.1, 1.0, 3, dtype=jnp.float32)
    if name.startswith("vmap"):
        x = jnp.stack([x, 2 * x])
    got = OUTSIDE[name](interop.wrap(torch_cube, "torch", "jax"))(x)
    want = OUTSIDE[name](jax_cube)(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


# -- dtypes under jit: what crosses eagerly crosses, what is refused is refused alike -----------


def test_every_dtype_jax_carries_has_an_ffi_code() -> None:
    from interop_jax import NARROW, WIDE

    assert {d.name for d in xla_ffi._dtype_codes().values()} == NARROW | WIDE


def test_float8_e8m0fnu_crosses_under_jit_as_eagerly() -> None:
    x = jnp.asarray([0.5, 1.0, 4.0], dtype=jnp.float8_e8m0fnu)
    bridged = interop.wrap(lambda x: x.clone(), "torch", "jax")
    eager, jitted = bridged(x), jax.jit(bridged)(x)
    assert eager.dtype == jitted.dtype == jnp.float8_e8m0fnu
    np.testing.assert_array_equal(np.asarray(jitted, np.float32), [0.5, 1.0, 4.0])


def tf_as_string(x: Any) -> Any:
    tf = pytest.importorskip("tensorflow")
    return tf.strings.as_string(x)


REFUSED = {  # a function, its source, an input, the leaf the refusal names
    "torch complex32 output": (
        lambda x: x.to(torch.complex32),
        "torch",
        lambda: jnp.ones(3),
        "output leaf 0",
    ),
    "tensorflow string output": (tf_as_string, "tensorflow", lambda: jnp.ones(3), "output leaf 0"),
    "float8_e3m4 into torch": (
        lambda x: x * 2,
        "torch",
        lambda: jnp.ones(3, jnp.float8_e3m4),
        "argument leaf 0",
    ),
    "int4 into torch": (lambda x: x, "torch", lambda: jnp.ones(3, jnp.int4), "argument leaf 0"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_dtype_refused_eagerly_is_refused_alike_under_jit(name: str) -> None:
    fn, source, make, leaf = REFUSED[name]
    bridged = interop.wrap(fn, source, "jax")
    with pytest.raises(interop.errors.UnsupportedDTypeError, match=leaf):
        bridged(make())
    bridged = interop.wrap(fn, source, "jax")  # a fresh one: nothing learnt from the eager call
    with pytest.raises(interop.errors.UnsupportedDTypeError, match=leaf):
        jax.jit(bridged)(make())


# -- the custom call under JAX's control flow, batching and threads -----------------------------


def torch_sin2(x: Any) -> Any:
    return torch.sin(x) * 2


SWEEP = {  # each applied to (the bridged functions, their JAX twins) and one input
    "eager vmap": lambda f, g, x: jax.vmap(f)(x),
    "vmap in_axes=1, nested": lambda f, g, x: jax.jit(jax.vmap(jax.vmap(f), in_axes=1))(x),
    "vmap of grad, an unbatched argument": lambda f, g, x: jax.jit(
        jax.vmap(jax.grad(lambda a, b: g(a * b)), in_axes=(None, 0))
    )(x[0], x),
    "grad of lax.map": lambda f, g, x: jax.jit(jax.grad(lambda x: jax.lax.map(g, x).sum()))(x),
    "grad of cond": lambda f, g, x: jax.jit(
        jax.grad(lambda x: jax.lax.cond(x[0, 0] > 0, g, lambda y: f(y).sum(), x))
    )(x),
    "grad of fori_loop": lambda f, g, x: jax.jit(
        jax.grad(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c + g(x * c), 1.0))
    )(x),
    "grad of checkpoint, nothing saved": lambda f, g, x: jax.jit(
        jax.grad(jax.checkpoint(g, policy=jax.checkpoint_policies.nothing_saveable))
    )(x),
    "donated input": lambda f, g, x: jax.jit(jax.value_and_grad(g), donate_argnums=0)(x + 0),
}


@pytest.mark.parametrize("name", list(SWEEP))
def test_the_bridge_under_control_flow_and_batching_equals_native_jax(name: str) -> None:
    x = jnp.linspace(0.1, 1.2, 12, dtype=jnp.float32).reshape(4, 3)
    bridged = (interop.wrap(torch_sin2, "torch", "jax"), interop.wrap(torch_cube, "torch", "jax"))
    got = SWEEP[name](*bridged, x)
    want = SWEEP[name](lambda x: jnp.sin(x) * 2, jax_cube, x)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)


def test_threads_calling_one_compiled_gradient_get_their_own_values() -> None:
    """Eight threads share one executable (and, on the FFI path, the stash of kept graphs):
    each step's gradient is its own inputs'."""
    import threading

    compiled = jax.jit(jax.value_and_grad(interop.wrap(torch_loss, "torch", "jax")))
    w, x = data()
    scales = [1.0 + i / 4 for i in range(8)]
    wrong: list[Any] = []

    def steps(scale: float) -> None:
        want = jax.value_and_grad(jax_loss)(w * scale, x)
        for _ in range(10):
            got = compiled(w * scale, x)
            if not np.allclose(got[1], want[1], rtol=1e-4, atol=1e-6):
                wrong.append(scale)

    threads = [threading.Thread(target=steps, args=(s,)) for s in scales]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not wrong and not any(t.is_alive() for t in threads)
