"""The floor `python -m benchmarks.grad` measures bridged steps against: the same step through
the target's mechanism with the bridge taken out. It must convert nothing, and run the source
framework's own forward and backward once each per step, as the bridged step runs them."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from interop import api

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(f) for f in ("torch", "jax")), reason="torch and JAX"
)

CASES = [("jax", "torch", "eager"), ("jax", "torch", "torch.compile"), ("torch", "jax", "jit")]


@pytest.mark.parametrize("source,target,mode", CASES, ids=["-".join(c) for c in CASES])
def test_the_floor_converts_nothing_and_runs_the_source_once_each_way(
    source: str, target: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import interop
    from benchmarks import grad

    counts = {"convert": 0, "forward": 0, "backward": 0}
    wrapped = interop.wrap(grad.math_in(source), source, target)
    x = grad.make(target, 16)
    value, gradient = grad.steps(target, grad.math_in(target))["eager"](x)
    xs, ct = grad.source_tensors(source, 16)
    native = grad.Native(source, grad.math_in(source), xs, ct)
    floor = grad.steps(target, grad.floor_of(wrapped, native, value, [gradient]))[mode]
    bridged = grad.steps(target, wrapped)[mode]
    floor(x), bridged(x)  # traced, compiled, warm

    def counted(name: str, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return method(*args, **kwargs)

        return call

    monkeypatch.setattr(api, "convert", counted("convert", api.convert))
    forward = native.run if source == "jax" else native.forward  # JAX's forward keeps nothing
    monkeypatch.setattr(
        native, "run" if source == "jax" else "forward", counted("forward", forward)
    )
    monkeypatch.setattr(native, "backward", counted("backward", native.backward))
    y, g = floor(x)
    assert counts == {"convert": 0, "forward": 1, "backward": 1}
    assert float(grad.as_numpy(y)) == pytest.approx(float(grad.as_numpy(value)))
    assert grad.as_numpy(g).tolist() == pytest.approx(grad.as_numpy(gradient).tolist())
    bridged(x)
    assert counts["convert"] >= 4  # what the floor leaves out: inputs, outputs, both ways


def test_the_attribution_knocks_out_the_conversions_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--attribute`: with `take` knocked out only the output and the gradient cross (2), with
    `give` only the input and the cotangent (2), with both nothing; the gradient stays right."""
    from benchmarks import grad

    x, variants = grad.knockouts("jax", "torch")
    moved: list[str] = []
    real = api.convert
    for name, fn in variants.items():
        step = grad.steps("torch", fn)["eager"]
        step(x)  # the tensors made ahead are made
        monkeypatch.setattr(api, "convert", lambda y, to, **k: moved.append(to) or real(y, to, **k))
        y, g = step(x)
        monkeypatch.setattr(api, "convert", real)
        want = {"bridged": 4, "floor": 0, "no take": 2, "no give": 2, "neither": 0}[name]
        assert len(moved) == want, (name, moved)
        moved.clear()
        want_y, want_g = (x.sin() * x).sum().item(), (x.sin() + x * x.cos()).detach().numpy()
        assert float(grad.as_numpy(y)) == pytest.approx(want_y, rel=1e-5)
        assert grad.as_numpy(g).tolist() == pytest.approx(want_g.tolist(), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("target", ["torch", "tensorflow"])
def test_the_hand_written_step_is_right_and_goes_around_interop(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`by_hand`: the reference a bridged step is also measured against crosses through the
    frameworks' own DLPack calls (never `interop.convert`) and gives the native gradient."""
    if importlib.util.find_spec(target) is None:
        pytest.skip(f"{target} is not installed")
    from benchmarks import grad

    moved: list[str] = []
    real = api.convert
    monkeypatch.setattr(api, "convert", lambda y, to, **k: moved.append(to) or real(y, to, **k))
    step = grad.steps(target, grad.by_hand("jax", target, grad.math_in("jax")))["eager"]
    x = grad.make(target, 16)
    y, g = step(x)
    want_y, want_g = grad.steps(target, grad.math_in(target))["eager"](x)
    assert moved == []
    assert float(grad.as_numpy(y)) == pytest.approx(float(grad.as_numpy(want_y)), rel=1e-5)
    assert grad.as_numpy(g).tolist() == pytest.approx(
        grad.as_numpy(want_g).tolist(), rel=1e-5, abs=1e-6
    )
    assert grad.by_hand("torch", "jax", grad.math_in("torch")) is None
