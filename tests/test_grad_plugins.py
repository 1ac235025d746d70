"""Gradients come from adapters: a plugin's `grad_source()` makes its functions wrappable, an
adapter without the hooks is refused with a typed error, and the conformance kit's check of the
hooks can fail. Each case registers its adapter in a fresh interpreter, so that the adapters
it adds are seen by no other test."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
HAS_TORCH = importlib.util.find_spec("torch") is not None

# A plugin for "npgrad": NumPy's arrays, with gradients by the complex step. For f real-analytic
# and written with NumPy's ufuncs, Im f(x + ih·e_k) / h is ∂f/∂x_k to rounding (no difference of
# nearby values is taken), so the source's reverse rule needs no tape: one complex evaluation per
# input element.
PLUGIN = """
import json, sys
import numpy as np
import interop
from interop.grad import Source, TensorSpec, dtype_name
from interop.roles import Gradients
from interop_numpy import NumpyAdapter

STEP = 1e-30


class ComplexStep(Source):
    name = "npgrad"

    def tensor_types(self):
        return (np.ndarray,)

    def vjp_fn(self, fn, diff, out_diff, conj):
        n = len(diff)

        def vjp(args):
            xs, cts = args[:n], args[n:]
            grads = []
            for i, d in enumerate(diff):
                if not d:
                    continue
                grad = np.zeros(xs[i].shape)
                for k in np.ndindex(xs[i].shape):
                    stepped = [x.astype(complex) for x in xs]
                    stepped[i][k] += STEP * 1j
                    ys = [y for y, o in zip(fn(stepped), out_diff) if o]
                    grad[k] = sum(float((c * (y.imag / STEP)).sum()) for c, y in zip(cts, ys))
                grads.append(grad.astype(xs[i].dtype))
            return grads

        return vjp

    def out_specs(self, fn, specs):
        ys = fn([np.zeros(s.shape, s.dtype) for s in specs])
        return [TensorSpec(tuple(y.shape), dtype_name(y.dtype)) for y in ys]


SOURCE = ComplexStep()


class NpGrad(NumpyAdapter, Gradients):
    name, aliases = "npgrad", ()

    def grad_source(self):
        return SOURCE


interop.register(NpGrad())
"""


def run(code: str) -> Any:
    """The JSON a script prints last, run in a fresh interpreter (its stderr on failure)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_a_plugins_grad_source_is_wrapped_and_differentiated_by_torch() -> None:
    pytest.importorskip("numpy")
    got = run(
        PLUGIN
        + """
import torch
from interop.testing.suite import grad_hooks

f = interop.wrap(lambda x, w: np.asarray((np.sin(x) * w).sum()), "npgrad", "torch")
x = torch.linspace(-1.0, 2.0, 5, dtype=torch.float64, requires_grad=True)
w = torch.arange(5.0, dtype=torch.float64, requires_grad=True)
loss = f(x, w)
loss.backward()
# torch's own autodiff of the same math, written with torch
x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
want = (torch.sin(x2) * w2).sum()
want.backward()
grad_hooks("npgrad", "torch")  # the kit's own check passes for the plugin
print(json.dumps({
    "type": type(loss).__name__,
    "repr": repr(f),
    "value": [loss.item(), want.item()],
    "x": [x.grad.tolist(), x2.grad.tolist()],
    "w": [w.grad.tolist(), w2.grad.tolist()],
}))
"""
    )
    assert got["type"] == "Tensor" and "npgrad -> torch" in got["repr"]
    assert got["value"][0] == pytest.approx(got["value"][1], rel=1e-12)
    assert got["x"][0] == pytest.approx(got["x"][1], rel=1e-12)
    assert got["w"][0] == pytest.approx(got["w"][1], rel=1e-12)


def test_adapters_without_working_hooks_are_refused_with_typed_errors() -> None:
    pytest.importorskip("numpy")
    got = run(
        PLUGIN
        + """
class Plain(NumpyAdapter):  # a contract 1.1 adapter that brings no gradients
    name, aliases = "plainfw", ()


class Older(NumpyAdapter):  # written for contract 1.0: it has no hooks of its own
    name, aliases, contract = "olderfw", (), (1, 0)


class Failing(NumpyAdapter, Gradients):  # its hook is broken: the plugin's fault, said as such
    name, aliases = "failingfw", ()

    def grad_source(self):
        raise ImportError("no module named failingfw_grad")


class Wrong(NumpyAdapter, Gradients):  # its hook gives something other than a Source
    name, aliases = "wrongfw", ()

    def grad_target(self):
        return SOURCE


interop.register(Plain())
interop.register(Older())
interop.register(Failing())
interop.register(Wrong())
out = []
for source, target in (("plainfw", "npgrad"), ("npgrad", "plainfw"), ("olderfw", "npgrad")):
    try:
        interop.wrap(len, source, target)
    except interop.GradientsUnsupportedError as exc:
        out.append([isinstance(exc, interop.UnknownFrameworkError), str(exc)])
try:
    interop.wrap(len, "nosuchfw", "npgrad")
except interop.GradientsUnsupportedError:
    out.append("a known framework's error for an unknown one")
except interop.UnknownFrameworkError as exc:
    out.append(str(exc))
for source, target in (("failingfw", "npgrad"), ("npgrad", "wrongfw")):
    try:
        interop.wrap(len, source, target)
    except interop.AdapterError as exc:
        out.append(str(exc))
print(json.dumps(out))
"""
    )
    assert len(got) == 6, got
    (typed1, plain_source), (typed2, plain_target), (typed3, older), unknown, *broken = got
    assert "'failingfw' adapter's grad_source() failed: ImportError" in broken[0]
    assert "'wrongfw' adapter's grad_target() gave a ComplexStep" in broken[1]
    assert typed1 and typed2 and typed3
    assert "plainfw cannot be a wrap source" in plain_source and "npgrad" in plain_source
    assert "plainfw cannot be a wrap target" in plain_target
    assert "olderfw cannot be a wrap source" in older
    assert "nosuchfw" in unknown and "'npgrad'" in unknown  # the sources there are, listed


def test_the_kit_fails_a_grad_source_whose_tensor_types_are_not_the_adapters() -> None:
    pytest.importorskip("numpy")
    got = run(
        PLUGIN
        + """
from interop.testing.suite import grad_hooks


class Elsewhere:  # no type of NumPy's
    pass


class Stray(ComplexStep):
    name = "strayfw"

    def tensor_types(self):
        return (Elsewhere,)


STRAY = Stray()


class StrayAdapter(NumpyAdapter, Gradients):
    name, aliases = "strayfw", ()

    def grad_source(self):
        return STRAY


interop.register(StrayAdapter())
out = []
for name in ("npgrad", "strayfw"):
    try:
        grad_hooks(name)
    except AssertionError as exc:
        out.append(str(exc))
    else:
        out.append("passed")
print(json.dumps(out))
"""
    )
    assert got[0] == "passed", got  # the same check passes the plugin whose types are its own
    assert "strayfw's grad_source().tensor_types()" in got[1] and "Elsewhere" in got[1], got
