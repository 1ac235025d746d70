"""TensorFlow for `interop.wrap` (`TensorflowAdapter.grad_source()` / `grad_target()`).

- As a source: the function runs eagerly under a `tf.GradientTape` (its reverse rule), and
  shapes are found ahead by tracing it with `tf.function`.
- As a target: a `tf.custom_gradient` built once per bridge; eager tensors run directly, graph
  tensors (`tf.function`) through `tf.py_function`.

Imported only when `interop.wrap` names TensorFlow; TensorFlow itself only once a wrapped
function runs.
"""

from __future__ import annotations

from typing import Any

from interop.errors import InteropError
from interop.grad import (
    BridgedFunction,
    Flat,
    OutSpecError,
    Pullback,
    Source,
    Target,
    TensorSpec,
    UnsupportedTransformError,
    dtype_name,
    framework,
)


class TensorflowSource(Source):
    name = "tensorflow"

    def tensor_types(self) -> tuple[type, ...]:
        tf = framework("tensorflow")

        return (tf.Tensor, tf.Variable, tf.IndexedSlices)

    def give(self, y: Any, to: str) -> Any:
        y = _dense(y)
        if y.shape.num_elements() == 1 and self._writes(to):
            # `convert` copies a one-element tensor for a consumer that may write it (TF shares
            # one buffer among equal scalar constants): its remembered route keys the tensor by
            # one export, then copies it through another (4 µs here, compiled). An output of
            # `fn` is the bridge's to hand over: a NumPy copy of its read-only view costs 2 µs.
            try:
                return self.convert(framework("numpy").array(self.convert(y, "numpy")), to)
            except InteropError:  # a dtype NumPy does not hold: the core's own way
                pass
        return self.convert(y, to)

    def _writes(self, to: str) -> bool:
        """Whether framework `to`'s tensors may be written (its adapter's capabilities)."""
        return bool(self.hub.target(to).capabilities().writes)

    def call(self, fn: Flat, xs: list[Any], owned: bool = False) -> list[Any]:
        return [_dense(y) for y in fn(xs)]

    def forward(
        self,
        fn: Flat,
        xs: list[Any],
        diff: list[bool],
        out_diff: list[bool] | None,
        conj: bool,
        owned: bool = False,
    ) -> tuple[list[Any], Pullback]:
        tf = framework("tensorflow")

        inputs = [x for x, d in zip(xs, diff, strict=True) if d]
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(inputs)
            ys = [_dense(y) for y in fn(xs)]
        known = out_diff if out_diff is not None else [self._diff(y) for y in ys]
        asked: list[bool] = []

        def pullback(cts: list[Any]) -> list[Any]:
            if asked:  # a tape answers once (persistent ones cost more): recompute after that
                return self.call(self.cached_vjp(fn, diff, known, conj), [*xs, *cts])
            asked.append(True)
            return _tf_grads(tape, ys, inputs, cts, conj)

        return ys, pullback

    def vjp_fn(self, fn: Flat, diff: list[bool], out_diff: list[bool], conj: bool) -> Flat:
        tf = framework("tensorflow")

        n = len(diff)

        def vjp(args: list[Any]) -> list[Any]:
            xs, cts = args[:n], list(args[n:])
            inputs = [x for x, d in zip(xs, diff, strict=True) if d]
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(inputs)
                ys = [_dense(y) for y in fn(list(xs))]
            return _tf_grads(tape, ys, inputs, cts, conj)

        return vjp

    def out_specs(self, fn: Flat, specs: list[TensorSpec]) -> list[TensorSpec]:
        tf = framework("tensorflow")

        traced = tf.function(lambda *xs: fn(list(xs)), autograph=False)
        concrete = traced.get_concrete_function(*[tf.TensorSpec(s.shape, s.dtype) for s in specs])
        out = []
        for y in tf.nest.flatten(concrete.structured_outputs):
            if y.shape.rank is None or None in y.shape.as_list():
                raise OutSpecError(
                    f"TensorFlow cannot tell an output's shape ahead ({y.shape}); pass out_spec"
                )
            out.append(TensorSpec(tuple(y.shape.as_list()), dtype_name(y.dtype)))
        return out


def _dense(y: Any) -> Any:
    """TF gradients of gathers are `IndexedSlices`: a dense tensor is what crosses over."""
    tf = framework("tensorflow")

    return tf.convert_to_tensor(y) if isinstance(y, tf.IndexedSlices) else y


def _tf_grads(tape: Any, ys: list[Any], inputs: list[Any], cts: list[Any], conj: bool) -> list[Any]:
    tf = framework("tensorflow")

    if conj:
        cts = [tf.math.conj(c) if c.dtype.is_complex else c for c in cts]
    outs = [y for y in ys if y.dtype.is_floating or y.dtype.is_complex]
    if not inputs:
        return []
    grads = tape.gradient(
        outs, inputs, output_gradients=cts, unconnected_gradients=tf.UnconnectedGradients.ZERO
    )
    grads = [_dense(g) for g in grads]
    return [tf.math.conj(g) if conj and g.dtype.is_complex else g for g in grads]


def _recording() -> bool:
    """Whether a TF tape may record now (TF's private check; True when it is not there)."""
    try:
        could_record = framework("tensorflow.python.eager.record").could_possibly_record
    except (ImportError, AttributeError):  # pragma: no cover - assume it records
        return True
    return bool(could_record())


def _refuse_xla(bridge: BridgedFunction) -> None:
    try:
        graph = framework("tensorflow.python.framework.ops").get_default_graph()
        in_xla = framework("tensorflow.python.ops.control_flow_util").GraphOrParentsInXlaContext
    except (ImportError, AttributeError):  # pragma: no cover - XLA reports EagerPyFunc itself
        return
    if in_xla(graph):
        raise UnsupportedTransformError(
            f"{bridge.label}: tf.function(jit_compile=True) cannot compile a function bridged "
            f"from {bridge.source.name}: XLA cannot call back into Python (it has no kernel for "
            "tf.py_function); drop jit_compile (plain tf.function runs it), or compile only "
            "the parts that do not call the wrapped function"
        )


class TensorflowTarget(Target):
    name = "tensorflow"

    def tensor_types(self) -> tuple[type, ...]:
        tf = framework("tensorflow")

        return (tf.Tensor, tf.Variable)

    def prepare(self, x: Any) -> Any:
        tf = framework("tensorflow")

        return tf.convert_to_tensor(x) if isinstance(x, tf.Variable) else x

    def value_and_grad(self, fn: Any, x: Any) -> tuple[Any, Any]:
        tf = framework("tensorflow")
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return y, tape.gradient(y, x)

    def apply(self, bridge: BridgedFunction, xs: list[Any]) -> list[Any]:
        rule = bridge.state.get("tf")
        if rule is None:
            rule = bridge.state["tf"] = self._rule(bridge)
        return list(rule(*xs))

    def _rule(self, bridge: BridgedFunction) -> Any:
        tf = framework("tensorflow")

        @tf.custom_gradient
        def bridged(*xs: Any) -> Any:
            pull = None
            if not tf.executing_eagerly():
                ys = self._graph_run(bridge, list(xs))
            elif _recording():
                ys, pull = bridge.forward(list(xs))
            else:
                ys = bridge.run(list(xs))

            def grad(*cts: Any) -> list[Any]:
                cts_d = [
                    tf.zeros_like(y) if c is None else c
                    for y, c, d in zip(ys, cts, bridge.out_diff, strict=True)
                    if d
                ]
                if pull is not None and not _recording():
                    grads = pull(cts_d)
                else:  # under a tape or in a graph: the rule itself is recorded
                    grads = self.apply(bridge.backward(), [*xs, *cts_d])
                found = iter(grads)
                return [next(found) if d else None for d in bridge.diff]

            return list(ys), grad

        return bridged

    def _graph_run(self, bridge: BridgedFunction, xs: list[Any]) -> list[Any]:
        tf = framework("tensorflow")

        _refuse_xla(bridge)
        known = all(x.shape.rank is not None and None not in x.shape.as_list() for x in xs)
        shapes = [
            tuple(d or 1 for d in x.shape.as_list()) if x.shape.rank is not None else () for x in xs
        ]
        specs = bridge.out_specs(
            tuple(TensorSpec(s, dtype_name(x.dtype)) for s, x in zip(shapes, xs, strict=True))
        )

        def callback(*tensors: Any) -> list[Any]:
            ys = bridge.run_inside(list(tensors))
            if known:
                got = [TensorSpec(tuple(y.shape.as_list()), dtype_name(y.dtype)) for y in ys]
                bridge.check_specs(got, specs)
            return ys

        ys = tf.py_function(callback, xs, Tout=[tf.as_dtype(s.dtype) for s in specs])
        for y, spec in zip(ys, specs, strict=True):
            y.set_shape(spec.shape if known else [None] * len(spec.shape))
        return list(ys)


#: what `TensorflowAdapter.grad_source()` and `grad_target()` return
SOURCE = TensorflowSource()
TARGET = TensorflowTarget()
