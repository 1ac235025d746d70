"""What the core knows about read-only memory beyond DLPack's flag, and the immutable policy.

JAX and TensorFlow may share read-only memory zero-copy (they cannot write it), but their own
exports carry no READ_ONLY flag: a second hop into a writable framework would hand out a
writable alias of memory that was read-only (an immutable `bytes` object, even). So the core
remembers every read-only range it shared into such a framework, for as long as the source or
the framework's alias of it lives, and treats exports from those ranges as read-only.

The immutable policy says how buffers that are immutable by API (JAX, TensorFlow) reach
frameworks that can write: shared zero-copy ("share", the default, what users of jax->torch
expect) or always copied ("copy", for programs that write in place). Set it for the process
(`set_immutable_policy`, or INTEROP_IMMUTABLE=copy), or for a block (`immutable_policy`).
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .errors import InvalidArgumentError

SHARE = "share"  # immutable-by-API buffers reach writable consumers zero-copy (the default)
COPY = "copy"  # ... or always as a copy (interop.immutable_policy("copy"))

POLICY_ENV = "INTEROP_IMMUTABLE"
POLICIES = (SHARE, COPY)


class Ranges:
    """Address ranges the core remembers about read-only memory it shared into frameworks
    whose exports lose the flag (interop.engine.Hub).

    An entry lives while any of its owners lives: the read-only source and the framework's
    alias of it. The source alone is not enough: a `memoryview` of `bytes` is the user's view,
    not the memory, and may die while the alias (which keeps only the bytes alive) lives on.
    Empty, it costs the fast path one truth test.
    """

    def __init__(self) -> None:
        #: token -> (start, end); the fast path tests this dict's truth itself (a C-level test,
        #: where `bool(ranges)` would run a Python method on every conversion)
        self.entries: dict[int, tuple[int, int]] = {}
        #: token -> the weak references to the entry's owners (the token: the first one's id)
        self._refs: dict[int, list[weakref.ref[object]]] = {}
        #: id of each weak reference -> its entry's token
        self._tokens: dict[int, int] = {}
        self._forget_entry = self._forget  # bound once, not per add

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, start: int, nbytes: int, *owners: object) -> bool:
        """Remember [start, start + nbytes) while any of `owners` that can be weakly
        referenced lives; False (nothing remembered) when none can.

        Weak references (not `weakref.finalize`, four times dearer). Single dict operations,
        atomic under the GIL: a callback may run in any thread, inside GC."""
        refs = []
        for owner in owners:
            try:
                refs.append(weakref.ref(owner, self._forget_entry))
            except TypeError:  # MXNet's NDArray, bytes, ...
                continue
        if not refs:
            return False
        token = id(refs[0])  # a callback's reference is new, its id unique while kept
        for ref in refs:
            self._tokens[id(ref)] = token
        self._refs[token] = refs
        self.entries[token] = (start, start + max(nbytes, 1))
        return True

    def _forget(self, ref: object) -> None:
        token = self._tokens.get(id(ref))
        refs = None if token is None else self._refs.get(token)
        if token is None or refs is None or any(other() is not None for other in refs):
            return  # another owner still holds the memory
        self.entries.pop(token, None)
        self._refs.pop(token, None)
        for other in refs:
            self._tokens.pop(id(other), None)

    def covers(self, start: int, nbytes: int) -> bool:
        """Whether any byte of [start, start + nbytes) lies in a remembered range."""
        end = start + max(nbytes, 1)
        spans = list(self.entries.values())  # one C-level copy: safe against callbacks
        return any(low < end and start < high for low, high in spans)


def _policy_from_env() -> str:
    """INTEROP_IMMUTABLE's policy; a value that is neither is not taken for "share" in silence
    (a typo of "copy" would share what was meant to be copied): it warns and copies."""
    value = os.environ.get(POLICY_ENV, "").strip().lower() or SHARE
    if value not in POLICIES:
        warnings.warn(
            f"{POLICY_ENV}={value!r} is neither 'share' nor 'copy': immutable buffers reach "
            "writable frameworks copied, the safe choice, until it is corrected",
            RuntimeWarning,
            stacklevel=2,
        )
        return COPY
    return COPY if value == COPY else SHARE  # the constants themselves: compared by identity


#: the process-wide policy (set_immutable_policy); the pure fast path reads it as an attribute
process_policy = _policy_from_env()
_block_policy: ContextVar[str | None] = ContextVar("interop_immutable_policy", default=None)
#: the policy of the enclosing `immutable_policy` block, or None: the ContextVar's own getter
block_policy = _block_policy.get


def current_policy() -> str:
    return _block_policy.get() or process_policy


def _check(mode: str) -> str:
    """`mode` as one of the two policy constants (the fast path compares them by identity)."""
    for policy in POLICIES:
        if mode == policy:
            return policy
    raise InvalidArgumentError(f"the immutable policy is 'share' or 'copy', not {mode!r}")


def set_immutable_policy(mode: str) -> str:
    """Set the process-wide policy ("share" or "copy"); returns the previous one."""
    global process_policy
    previous, process_policy = process_policy, _check(mode)
    return previous


@contextmanager
def immutable_policy(mode: str) -> Iterator[None]:
    """Within the block (this thread or task only), immutable-by-API buffers reach writable
    frameworks as `mode` says: "copy" gives them fresh memory, "share" zero-copy aliases."""
    token = _block_policy.set(_check(mode))
    try:
        yield
    finally:
        _block_policy.reset(token)
