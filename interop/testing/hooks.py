"""Which adapter hook failed: a kit case that raises names the hook, not only the framework.

An exception raised in an adapter's hook reaches the kit either directly (the kit calls
`to_bytes`, `sample`, `mutate`, ...) or through the core, which wraps it in a typed error
naming the step ("torch failed to import the tensor ...": `from_dlpack`, `export`, `copy`).
Both carry the hook's frame in a traceback: the innermost frame of a public method running
on an `Adapter` names it, and the exception that left it is the hook's own.
"""

from __future__ import annotations

from collections.abc import Callable
from types import CodeType, TracebackType
from typing import Any

from interop.adapter import Adapter


class HookError(AssertionError):
    """A kit case failed because an adapter hook raised: `adapter.hook raised Type: message`.
    An AssertionError, as every failure of the kit is."""

    def __init__(self, adapter: str, hook: str, error: BaseException, seen: BaseException):
        self.adapter, self.hook, self.error, self.seen = adapter, hook, error, seen
        message = f"{adapter}.{hook} raised {type(error).__name__}: {error}"
        if seen is not error:  # the core's wrapping says where it happened
            message += f"\n  (the kit saw {type(seen).__name__}: {seen})"
        super().__init__(message)

    def __reduce__(self) -> Any:  # pickled with its parts, as made
        return HookError, (self.adapter, self.hook, self.error, self.seen)


def _hook_of(owner: Adapter, code: CodeType) -> str | None:
    """The public method of `owner` whose code `code` is (whatever its function is called: a
    hook may be assigned from elsewhere), or None."""
    for kind in type(owner).__mro__:
        for name, value in vars(kind).items():
            if not name.startswith("_") and getattr(value, "__code__", None) is code:
                return name
    return None


def _hook_frame(tb: TracebackType | None) -> tuple[str, str] | None:
    """(adapter name, hook) of the innermost public adapter method among `tb`'s frames."""
    found = None
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, Adapter):
            hook = _hook_of(owner, tb.tb_frame.f_code)
            if hook is not None:
                found = (str(owner.name), hook)
        tb = tb.tb_next
    return found


def failing_hook(exc: BaseException) -> HookError | None:
    """The HookError naming the adapter hook `exc` came from (itself, or the cause or context
    the core chained to it), or None when no hook raised it (the kit's own assertion)."""
    chain: BaseException | None = exc
    seen: set[int] = set()
    while chain is not None and id(chain) not in seen:
        if isinstance(chain, HookError):  # named already, deeper down
            return HookError(chain.adapter, chain.hook, chain.error, exc)
        seen.add(id(chain))
        found = _hook_frame(chain.__traceback__)
        if found is not None:
            return HookError(*found, chain, exc)
        chain = chain.__cause__ or chain.__context__
    return None


def call_naming_hooks(case: Callable[..., Any], *args: Any) -> Any:
    """`case(*args)`, where an exception an adapter hook raised becomes a HookError naming it."""
    try:
        return case(*args)
    except HookError:
        raise
    except Exception as exc:
        named = failing_hook(exc)
        if named is None:
            raise
        raise named from exc
