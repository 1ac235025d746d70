"""The optional roles of an adapter (contract 2.0): the one module plugins import them from.

`interop.Adapter` holds what every framework must say (its names, the types it owns, its
`Capabilities`, `export`, `from_dlpack`, `copy`). Everything else is a role, a class here that
an adapter takes by subclassing it, as a pluggy plugin implements a hookspec:

    class MyFwAdapter(Adapter, Devices, Testing): ...

A role's methods are its hooks, with their defaults; an adapter overrides those it needs. The
registry reads the roles an adapter declares once, when it loads it (`Registry.roles_of`,
`Registry.role_holder`): the core asks only adapters that declare a role for what the role
brings (a host copier, gradients, sharded arrays), never an adapter found by its name. A
class that does not declare a role gets the role's defaults filled in (`fill_defaults`), so
the core's calls need no probing; a hook defined without its role declared is a contract
error naming the role (`role_problems`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

from .errors import DeviceError

if TYPE_CHECKING:
    from .info import Device
    from .sharding.model import LocalShards
    from .step import Step


class Role:
    """Base of the roles. `hooks`: the members an adapter taking the role may override (set
    for each role from its class body); `required`: those it must override; `service`: the
    core asks only the role's holder (`Registry.role_holder`), so adapters not declaring it
    are not given its defaults."""

    hooks: ClassVar[tuple[str, ...]] = ()
    required: ClassVar[tuple[str, ...]] = ()
    service: ClassVar[bool] = False

    if TYPE_CHECKING:  # what the roles' defaults read of the adapter (interop.Adapter's core)
        name: ClassVar[str]

        def capabilities(self) -> Any: ...  # (a Capabilities: interop.adapter imports us)

        def import_framework(self) -> Any: ...

        def imported(self) -> bool: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if Role in cls.__bases__:
            own = (n for n in vars(cls) if not n.startswith("_"))
            cls.hooks = tuple(n for n in own if n not in ("required", "service"))


class FastPath(Role):
    """Hooks the warm path converts through without planning or reading a capsule (the
    compiled and pure routes call them). Without it every conversion takes the full path."""

    #: (name, allowed values) pairs: a zero-argument method or attribute of a tensor whose
    #: value must be in the set for the compiled fast path to export it directly (torch:
    #: is_neg() must be False) - what `export_hazard` and `export` check. A third item, a
    #: DLPack dtype code, asks only tensors of that code, after the export (torch: is_conj()
    #: of complex tensors, the only ones that carry the bit)
    route_guards: ClassVar[tuple[tuple[Any, ...], ...]] = ()

    def fingerprint(self, x: Any) -> Hashable | None:
        """A cheap key from `x`'s own attributes such that equal keys mean equal DLPack facts
        (dtype, device, layout class, read-only, emptiness, hazards) of the export `exporter`
        makes, except the data address; None when that cannot be told cheaply, and for a
        tensor with elements but no data (a NULL address, which the plan refuses). The
        pure-Python fast path shares a tensor without reading its capsule when its key was
        seen before."""
        return None

    def exporter(self, versioned: bool, writable: bool, dtype: str) -> Callable[[Any], Any] | None:
        """A function giving the capsule (of that kind) the full path would take from a tensor
        of `dtype` whose `fingerprint` is not None; or None: no fast path from here. Return
        the same object for the same arguments (the compiled path compares them)."""
        return None

    def bare_exporter(
        self, versioned: bool, writable: bool, dtype: str
    ) -> Callable[[Any], Any] | None:
        """`exporter`'s twin whose capsules have no destructor, for a framework whose capsule
        destructor is Python code that runs after every conversion, taken or not (MXNet's
        ctypes callback: 0.6-1.2 us). Pure-Python routes that hand the capsule straight to
        the importer use it and release what the importer did not take; None: `exporter`."""
        return None

    def fast_address(self, x: Any) -> int:
        """The address of `x`'s first element, where the framework gives it cheaply (a pointer
        attribute): the pure-Python fast path then checks a target's alignment without reading
        the capsule. Override only if it is cheap; the default says it is not."""
        raise NotImplementedError

    def importer(self, as_object: bool, dtype: str) -> Callable[[Any], Any] | None:
        """A function importing a capsule of `dtype` as the full path's `from_dlpack` would
        (`as_object`: it gets an object whose `__dlpack__` returns the capsule); or None."""
        return None

    def import_guard(self) -> Callable[[], Any] | None:
        """A call the fast path makes before it imports through the framework's C exchange API
        (`__dlpack_c_exchange_api__`) instead of `importer`: falsy sends the conversion to the
        full path, whose `from_dlpack` makes something else in the framework's present mode
        (Paddle's static graph mode: a DenseTensor). None: the exchange import always makes
        what `from_dlpack` would."""
        return None


class HostCopier(Role):
    """Copies of other frameworks' host memory, made over their DLPack export (NumPy's
    today): the plan copies through its holder where a source's own copy is slower, and
    casts (`dtypes=`) with it. The core asks `Registry.role_holder(HostCopier)`."""

    service = True
    required: ClassVar[tuple[str, ...]] = ("host_copy",)

    def host_copy(self, source: Any, dtype: str | None = None) -> Any:
        """A compact, aligned, writable copy (a tensor of this framework) of CPU tensor
        `source` (an `ExchangeObject`); `dtype`: a checked cast into that dtype."""
        raise NotImplementedError

    def host_copier_of(self, exporter: Any, dtype: str) -> Callable[[Any], Any] | None:
        """`host_copy` as a function of a tensor that `exporter` (a source's `FastPath`
        hook) exports, for routes that replay a plan's copy; None: such plans are not
        remembered as routes."""
        return None


class AlignedAllocator(Role):
    """An allocator the core can make 64-byte aligned, so that the holder's new tensors reach
    importers sharing only aligned buffers (JAX, TensorFlow) zero-copy: what
    `interop.aligned_numpy()` and `set_aligned_numpy` switch (NumPy's, NEP 49)."""

    service = True
    required: ClassVar[tuple[str, ...]] = ("set_memory_handler",)

    def set_memory_handler(self, handler: Any | None) -> Any:
        """Make `handler` (a NEP 49 "mem_handler" capsule; None: the default) the allocator in
        the current context; return the one it replaces."""
        raise NotImplementedError


class CapsuleBoxes(Role):
    """Boxes for the core's pure-Python release runtime (`interop.releases`) made by the
    framework's C code, which keeps a pending exception where Python deleters would not
    (NumPy's); its own import acts as such a box. Asked once its framework is imported."""

    service = True
    required: ClassVar[tuple[str, ...]] = ("capsule_boxes",)

    def capsule_boxes(self, releases: Any) -> Any:
        """The boxes for `releases`, or None where this version cannot make them."""
        return None


class ImportRefusals(Role):
    """Refusals beyond what `Capabilities` declares, asked by the planner for every target."""

    def refusal(self, facts: Any) -> str | None:
        """Why this framework cannot import a tensor with `facts` (`.dtype`, `.device`, ...;
        see interop.plan.Facts) beyond the declared capabilities, or None. Plans are cached:
        the answer may depend only on the facts and on state `capabilities()` reflects."""
        return None

    def ndim_refusal(self, ndim: int) -> str | None:
        """Why a tensor of `ndim` dimensions cannot become one of its tensors now, or None:
        the declared bounds (`Capabilities.min_ndim`, `max_ndim`), unless a mode of the
        framework widens them (MXNet's NumPy semantics hold 0-d arrays). Asked on every
        planned call, beside the plan: routes send tensors outside the declared bounds there."""
        return self.capabilities().ndim_refusal(ndim)


class ExportHazards(Role):
    """What the planner must know of one source tensor before sharing it: a copy it needs
    first, or what `explain` must say of its export."""

    def export_hazard(self, x: Any) -> str:
        """Why `x` cannot be exported as it is, so it must be copied first ("" if it can):
        torch's lazy neg/conj views, whose DLPack export would lose the sign."""
        return ""

    def alias_hazard(self, x: Any) -> str:
        """Why a writable alias of `x` would be unsafe beyond its being immutable ("" if
        none): TensorFlow hands out one buffer for all equal scalar constants. Answer from
        what a route's key holds (the export's dtype, device, layout class, whether it has
        one element; `fingerprint`): the copy it asks for is remembered for the key."""
        return ""

    def export_notes(self, x: Any) -> tuple[str, ...]:
        """Things `explain` must say about exporting this tensor (a detach, a wait)."""
        return ()


class WritableImports(Role):
    """Write access for results its importer marks read-only (NumPy's legacy imports): what
    `Capabilities.writable_legacy_import` needs. The routes and the engine call it."""

    required: ClassVar[tuple[str, ...]] = ("make_writable",)

    def make_writable(self, result: Any) -> Any:
        """`result`, made by `from_dlpack` (or `importer`) of a legacy capsule and so marked
        read-only, with write access to its memory. The core calls it only where the plan
        says the memory may be written."""
        raise NotImplementedError


class Tracing(Role):
    """A tracer of the framework's own (torch.compile): while it traces, the registry loads
    no adapter, since adapters probe their framework when loaded."""

    def tracer(self) -> str | None:
        """The name of this framework's tracer if it is tracing the running code, else None."""
        return None


class Devices(Role):
    """Devices besides the host, and copies between them (`device=`): the planner, the engine
    and `device=` parsing call these."""

    #: how users write this framework's devices, for the error a `device=` the core cannot
    #: read gets (e.g. "torch.device('cuda', 0)")
    device_examples: ClassVar[tuple[str, ...]] = ()

    def parse_device(self, device: Any) -> Device | None:
        """The DLPack Device one of this framework's own device objects or spellings names
        (`torch.device("cuda", 1)` -> Device("cuda", 1)), or None when `device` is not one of
        them. The core asks only adapters whose framework is imported, so this may use it but
        must not import anything; raise DeviceError for one of its own that has no DLPack
        device (a TPU)."""
        return None

    def device_unavailable(self, device: Device) -> str | None:
        """Why `device` cannot be used here although declared (no GPU visible), or None."""
        if device.type == "cpu" and device.id != 0:
            return f"{self.name} has one CPU device, cpu:0"
        return None

    def on_cpu(self, x: Any) -> bool:
        """Whether `x` is in host memory, if that is cheap to tell (no stream to hand over
        then); False means "ask its `__dlpack_device__`"."""
        return False

    def to_device(self, x: Any, device: Device) -> Any:
        """A copy of `x` on `device` (raise DeviceError when the framework cannot)."""
        raise DeviceError(f"{self.name} cannot move tensors to {device}")

    def from_dlpack_to(self, source: Any, device: Device) -> Any:
        """Import a source living on another device by copying it onto `device` (for
        frameworks that cannot hold the source's device at all, declared in `moves_from`)."""
        raise DeviceError(f"{self.name} cannot import tensors from another device")


class Streams(Role):
    """Asynchronous work: the stream a consumer reads on, and a wait for pending frees."""

    def consumer_stream(self, device: Device) -> Any:
        """The stream this framework would read on (for `__dlpack__(stream=...)`), or None."""
        return None

    def synchronize(self) -> None:
        """Wait until the framework has finished pending work, including freeing memory it
        took through DLPack (MXNet's asynchronous engine calls deleters later). The kit calls
        it before counting releases; frameworks that release synchronously need not."""


class Testing(Role):
    """The conformance kit's and the matrix's hooks, and the `framework` fixture of interop's
    pytest plugin: the framework's own APIs only, the oracle the kit checks conversions by."""

    required: ClassVar[tuple[str, ...]] = ("sample", "to_bytes", "data_address", "exercise")

    def sample(self, dtype: str, shape: tuple[int, ...]) -> Any:
        """A deterministic tensor of `dtype` and `shape` (values from interop.samples); raise
        for a dtype the framework cannot make (the kit then skips that case)."""
        raise NotImplementedError

    def views(self, x: Any) -> dict[str, Any]:
        """Views of a 2-D or larger `x` in other layouts, by name: "transposed", "step-sliced",
        "offset", "negative". Frameworks without strided views return {}."""
        return {}

    def to_bytes(self, x: Any) -> bytes:
        """The elements of `x` in row-major order as raw bytes: the bit-for-bit oracle."""
        raise NotImplementedError

    def data_address(self, x: Any) -> int:
        """Address of the first element, read through the framework's own API."""
        raise NotImplementedError

    def mutate(self, x: Any) -> bool:
        """Set the first element of `x` to one, in place; False if the framework cannot."""
        return False

    def exercise(self, x: Any) -> tuple[Any, Any] | None:
        """Run two of the framework's own kernels on `x` and return `(doubled, total)`.

        `doubled` is the framework's own `x + x` (for bool dtype: the framework's logical not
        of `x`), same shape and dtype as `x`; `total` is the framework's own sum-reduction of
        all elements of `x` as a 0-d tensor of the framework (for bool: the number of True
        elements, an integer). Return None for a dtype the framework has no such kernels for.

        The kit uses every result with these: a tensor that reads back fine can still abort
        the first kernel that touches it (TensorFlow on an unaligned buffer).
        """
        raise NotImplementedError

    def array_namespace(self) -> Any:
        """The module users write array code against (`xp` in the array API's words): the
        framework's top module by default; JAX's `jax.numpy`, TensorFlow's
        `tf.experimental.numpy`, MXNet's `mx.np` and MLX's `mlx.core` override it. Imports the
        framework (`import_framework`): called only when a test asks for it."""
        return self.import_framework()

    def namespace_array(self, x: Any) -> Any:
        """`x`, a result of `from_dlpack`, as the array type `array_namespace()` works on (the
        same object by default; MXNet's `mx.nd.NDArray` becomes an `mx.np.ndarray`)."""
        return x


class Sharding(Role):
    """Sharded conversion (`interop.sharding`) for the framework's distributed arrays."""

    required: ClassVar[tuple[str, ...]] = ("sharded",)

    def sharded(self) -> ShardedArrays | None:
        """The framework's distributed arrays (`ShardedArrays`), or None: its arrays convert
        one by one. Return the same object every time; called only once the framework is
        imported."""
        return None


class Gradients(Role):
    """Gradients across frameworks (`interop.wrap`): the framework as a source of wrapped
    functions, a caller of them, or both."""

    def grad_source(self) -> Any:
        """An `interop.grad.Source` (subclassed for this framework): functions written with
        its API can be wrapped by `interop.wrap`, which runs them and their reverse rule with
        it. None (the default): they cannot. Return the same object every time; it must not
        import the framework until one of its methods runs on a wrapped call."""
        return None

    def grad_target(self) -> Any:
        """An `interop.grad.Target` (subclassed for this framework): functions `interop.wrap`
        wraps can be called with its tensors and differentiated by its autodiff. None (the
        default): they cannot. Return the same object every time; imports as `grad_source`."""
        return None


class PytreeNodes(Role):
    """Containers the framework's pytree registry knows, taken apart by `convert_tree`."""

    required: ClassVar[tuple[str, ...]] = ("tree_node",)

    def tree_node(self) -> TreeNodes | None:
        """A function `node(x)` giving the `TreeNode` of a container the framework's pytree
        registry knows (a Flax struct, a class registered with torch's registry), or None for
        anything else; `interop.convert_tree` then walks such containers one level at a time.
        Return the same function every time. The core asks only while the framework is
        imported, and only about objects that are not tensors, scalars, or the standard
        containers it walks itself (dicts, lists, tuples, namedtuples, deques), before it
        takes a dataclass apart; the function must import nothing (read `sys.modules`)."""
        return None


class StandIns(Role):
    """Objects of the framework that are not its tensors but stand for one: NumPy's scalars
    (`np.float32(3.0)`) stand for 0-d arrays. `convert`, `convert_tree` and `explain` take the
    tensor `stand_in` makes of such an object, so it goes the framework's own way (its plans,
    its fast path) instead of a generic protocol's (an array interface, planned every call)."""

    def stand_in_types(self) -> tuple[type, ...]:
        """The types of such objects (subclasses count); asked once the framework is
        imported, once per type met."""
        return ()

    def stand_in(self, x: Any) -> Any | None:
        """A fresh tensor of the framework with `x`'s value (one of `stand_in_types`), or
        None where `x` converts as it is (then the generic protocols are tried)."""
        return None


#: a role class, for functions that give its holder
R = TypeVar("R", bound=Role)


class AllRoles(
    FastPath,
    ImportRefusals,
    ExportHazards,
    WritableImports,
    Tracing,
    Devices,
    Streams,
    Testing,
    Sharding,
    Gradients,
    PytreeNodes,
    StandIns,
):
    """Every role but the services: the hooks the core may call on any adapter (for type
    checkers; an adapter declares the roles it takes, the others' defaults are filled in)."""


#: the roles only their holder is asked for (`Registry.role_holder`)
SERVICES: tuple[type[Role], ...] = (HostCopier, AlignedAllocator, CapsuleBoxes)
#: every role, in the order `interop list` and the docs name them
ROLES: tuple[type[Role], ...] = (*AllRoles.__bases__, *SERVICES)


def declared(cls: type) -> tuple[type[Role], ...]:
    """The roles class `cls` declares (subclasses), in `ROLES` order."""
    return tuple(role for role in ROLES if issubclass(cls, role))


def role_default(role: type[Role], hook: str) -> Any:
    """The default `role` gives `hook` (a function, or a class attribute's value)."""
    return vars(role)[hook]


def fill_defaults(cls: type) -> None:
    """Give `cls` the defaults of every hook of the roles it does not declare (but services),
    unless it defines the name itself (`role_problems` reports that): resolved once, as the
    class is made, so the core calls hooks without probing for them. A role declared below a class
    that was filled keeps its own hooks (the filled defaults never shadow them)."""
    filled = []
    for role in ROLES:
        for hook in role.hooks:
            if not issubclass(cls, role):
                if not role.service and not hasattr(cls, hook):
                    setattr(cls, hook, role_default(role, hook))
                    filled.append(hook)
                continue
            definers = [k for k in cls.__mro__ if hook in vars(k)]
            if definers and _filled(definers[0], hook):  # a filled base would shadow the role
                setattr(cls, hook, next(vars(k)[hook] for k in definers if not _filled(k, hook)))
    cls._roles_filled = frozenset(filled)  # type: ignore[attr-defined]


def _filled(cls: type, hook: str) -> bool:
    return hook in vars(cls).get("_roles_filled", ())


def overrides(cls: type, role: type[Role], hook: str) -> bool:
    """Whether `cls` has its own `hook` of `role` (not the role's default)."""
    found = getattr(cls, hook, None)
    default = role_default(role, hook)
    if callable(default):
        return found is not None and found is not default
    return found is not None and found != default


def role_problems(cls: type, required: bool = True) -> list[str]:
    """What keeps adapter class `cls` from its contract's roles: a hook defined without its
    role declared, or (`required`) a declared role lacking a required hook."""
    kind, problems = cls.__name__, []
    for role in ROLES:
        if issubclass(cls, role):
            problems += [
                f"{kind} declares the {role.__name__} role but does not implement "
                f"{role.__name__}.{hook}"
                for hook in (role.required if required else ())
                if not overrides(cls, role, hook)
            ]
            continue
        problems += [
            f"{kind}.{hook} is a hook of the {role.__name__} role, which {kind} does not "
            f"declare: class {kind}(..., {role.__name__}) (interop.roles)"
            for hook in role.hooks
            if overrides(cls, role, hook)
        ]
    return problems


#: `ShardedArrays` members a hook may lack (the core does without them), and the first names
#: of renamed ones, still asked of hooks written before the rename
SHARDED_OPTIONAL = frozenset({"place"})
SHARDED_FORMER_NAMES = {"result_text": "describe"}


@runtime_checkable
class ShardedArrays(Protocol):
    """What `Sharding.sharded()` returns to bring sharded conversion for its framework
    (contract 1.1): the core's `interop.sharding` reads a source's local shards into the
    neutral model (`interop.sharding.model`: `LocalShards`, `MeshLayout`, a PartitionSpec-like
    `spec`), converts each shard through the per-tensor path, and asks the target's hook to
    rebuild its distributed array around them. The core never imports a framework for this:
    every method is called only once the framework is imported (one of its arrays exists).
    Errors are `interop.ShardingError`s (`MeshMismatchError`, ...) naming what to do next.
    """

    #: how plans name a source of this kind ("torch (DTensor)")
    label: str
    #: the framework's mesh type, for people ("DeviceMesh"): `device=` may name one
    mesh_name: str

    # --- as a source ------------------------------------------------------------------------
    def is_array_type(self, kind: type) -> bool:
        """Whether instances of `kind` (a type the adapter `owns`) may be distributed arrays;
        asked once per type, and the answer is remembered."""
        ...

    def is_sharded(self, x: Any, mesh_asked: bool) -> bool:
        """Whether `x` (of such a type) is spread over several devices, so converts shard by
        shard; `mesh_asked`: `device=` is another framework's mesh (a one-device array
        becomes a one-device distributed array then)."""
        ...

    def partial(self, x: Any) -> str:
        """ "" when `x` holds no pending sums; else what reducing them does, as a plan note."""
        ...

    def refuse_partial(self, x: Any, target: str | None = None) -> Exception:
        """The `PartialPlacementError` for `x` on its way to `target` (None: its own local
        shards), raised when no reduction was asked for."""
        ...

    def reduce_partial(self, x: Any) -> Any:
        """`x` with its pending sums reduced by the framework's own collective."""
        ...

    def read(self, x: Any, partial_as_reduced: bool = False) -> LocalShards:
        """This process's shards of `x`, shared (never copied), with their global indices,
        mesh devices and the placements as a spec. `partial_as_reduced`: describe `x` as it
        will be once reduced (for `explain`)."""
        ...

    def mesh_of(self, x: Any) -> Any:
        """The framework's own mesh of `x` (converting into the same framework keeps it)."""
        ...

    def export_shard(self, data: Any) -> tuple[Any, Step | None]:
        """A shard as the per-tensor path should take it into another framework, and the
        step that says what was done to it (None: the shard itself)."""
        ...

    def processes(self) -> tuple[int, int] | str:
        """(this process's index, the process count) in the framework's distributed runtime,
        which number the shards it reads; or a sentence saying why there is none here."""
        ...

    # --- as a target --------------------------------------------------------------------------
    def is_mesh(self, device: Any) -> bool:
        """Whether `device` is one of the framework's meshes."""
        ...

    def context(
        self, shards: LocalShards, origin: tuple[int, int] | None, user_mesh: Any
    ) -> str | None:
        """Why the framework cannot hold `shards` as one distributed array in this process
        (the result is then `LocalShards`), or None; raises when the meshes cannot match.
        `origin`: (index, count) of this process in the runtime of the framework that
        numbered the shards' processes, None when that is this framework."""
        ...

    def fit(self, shards: LocalShards, user_mesh: Any) -> LocalShards:
        """`shards` as they will be rebuilt over `user_mesh` (a mesh of this framework, or
        None): the mesh axes named as it names them, say."""
        ...

    def locate(self, shards: LocalShards, user_mesh: Any) -> list[Any]:
        """Where each local shard goes in the rebuilt array (the framework's devices, one per
        shard, or []); refuses shards this process cannot hold."""
        ...

    def place_step(self, data: Any, where: Any, copy: bool | None) -> Step | None:
        """What putting converted shard `data` (still the source's) at `where` (from
        `locate`) costs, for `explain` (None: nothing)."""
        ...

    def place(self, array: Any, where: Any, copy: bool | None) -> Any:
        """Converted shard `array` (the framework's tensor) put at `where` (from `locate`), as
        `place_step` says; `build` then gets the placed shards. Optional: a hook without it
        places in `build` (contract 1.1 as first written). Called for every shard whenever
        `locate` gave devices, so it returns a shard already there as it is."""
        ...

    def result_text(self, shards: LocalShards, user_mesh: Any) -> str:
        """The distributed array `build` makes, in words, for `explain` (a hook written
        before this name calls it `describe`, which is still asked)."""
        ...

    def build(
        self,
        shards: LocalShards,
        arrays: list[Any],
        where: list[Any],
        copy: bool | None,
        user_mesh: Any,
    ) -> Any:
        """The distributed array over the shards' mesh (or `user_mesh`) whose local shards are
        `arrays` (the framework's tensors, converted, one per shard), without moving data."""
        ...


#: one level of a container: (a path fragment per child, such as "['w']" or ".bias"; the
#: children; a function building the container again from new children, in that order)
TreeNode = tuple[list[str], list[Any], Callable[[list[Any]], Any]]
#: what `PytreeNodes.tree_node()` returns: `x`'s `TreeNode`, or None when `x` is not a container
#: the framework's registry knows (a leaf, as far as this framework is concerned)
TreeNodes = Callable[[Any], TreeNode | None]
