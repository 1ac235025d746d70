"""Who releases what: the one runtime object behind every managed tensor the core builds.

A box (a managed tensor the core makes over another's DLTensor: a bridge or a re-wrap) and
owned memory (`capsule_over`) live in its tables until their consumer calls the deleter,
which releases the tensor beneath exactly once. Releases a consumer makes under a lock of its
own (Paddle frees imports under a lock its exports' deleters take again) are deferred: queued,
and released by conversions (`drain`) or by a daemon thread soon after; data addresses a
live import claims (Paddle files releases by address) are remembered here too.

Two twins, chosen once per process (`choose`): `Releases`, pure Python (its deleters are
ctypes callbacks), and `CompiledReleases`, where the accelerator is built, whose deleters
are C trampolines that keep a pending exception and whose deferred re-wraps release on a C
thread without the GIL. The compiled one also holds NumPy's 64-byte aligned allocator
(`interop.aligned_numpy`), which only C can be.
"""

from __future__ import annotations

import collections
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

#: how long the releasing thread waits, once woken, for conversions to release what is queued
LINGER_S = 0.002
#: how often it looks at the queue unwoken (`Releases.keep` queues without waking it)
POLL_S = 0.05

#: (capsule, claim) -> the capsule re-wrapped with its release deferred, or None where a live
#: import claims its data address (the capsule is then left as it was)
DeferRewrap = Callable[[object, bool], object]


class Boxes(Protocol):
    """Boxes a framework makes for the pure runtime, whose release then runs in that
    framework's C (which keeps a pending exception) instead of a ctypes callback: an
    adapter's optional `capsule_boxes(releases)` hook gives them (NumPy's)."""

    def bridge(self, capsule: object, inner: int, inner_versioned: bool, flags: int) -> Any:
        """`capsule`'s tensor in a capsule of the other kind, with `flags` (the old capsule
        used), or None where it cannot (the capsule left as it was)."""

    def defer(self, capsule: object, inner: int, versioned: bool, claim: bool) -> Any:
        """The deferring re-wrap (`DeferRewrap`), or NotImplemented where it cannot."""

    def again(self, capsule: object, inner: int, versioned: bool, flags: int) -> Any:
        """`capsule`'s tensor in a capsule of the same kind, with `flags`, whose release runs
        in that framework's C holding the GIL (`interop.capsule.gil_first`), or None where it
        cannot (the capsule left as it was)."""


class Releases:
    """The pure-Python twin: tables, the deferred queue and its thread, all in Python.

    `python_callbacks`: its deleters are ctypes callbacks, which lose an exception being
    raised when a consumer frees a tensor meanwhile (CPython replaces it with a SystemError
    and the release is lost): where it is true, NumPy boxes what it can (`interop.capsule`),
    and its release runs in NumPy's C."""

    python_callbacks = True

    def __init__(self, defer_rewrap: DeferRewrap) -> None:
        #: box address -> (the box's memory, inner address, inner's deleter as a callable,
        #: defer, the data address it claims or 0)
        self.bridges: dict[int, tuple[Any, int, Any, bool, int]] = {}
        #: managed tensor address -> (its structs, the owner, on_release) (`capsule_over`)
        self.owned: dict[int, tuple[Any, ...]] = {}
        #: data address -> what claims it for a live import; a dict, whose setdefault tests
        #: and claims in one step two threads cannot split
        self.claims: dict[int, int] = {}
        #: (the producer's deleter, what it releases), or a weak reference `keep` made: taken
        #: by `drain` and the thread,
        #: which is woken once per burst of releases, not once per release (a queue.Queue
        #: whose every put woke it cost 12 us per conversion into Paddle in GIL hand-overs)
        self.deferred: collections.deque[Any] = collections.deque()
        #: tested by the pure routes before they drain: a call costs more than the test
        self.queued: Any = self.deferred
        #: id of a weak reference queued by `keep` -> (the reference, what it keeps, claim)
        self.kept: dict[int, tuple[Any, Any, int]] = {}
        #: deleter calls for tensors already released (a double free, had the memory been C's)
        self.stray = 0
        self.defer_rewrap = defer_rewrap
        #: () -> Boxes, None (not yet: asked again) or False (never): given by the hub that
        #: knows the adapters (`take_boxes_from`, called where the context is built)
        self._find_boxes: Callable[[], Any] | None = None
        self._boxes: Any = None
        self._wake = threading.Event()
        #: held while a release taken off the queue runs (re-entrant: a producer's deleter
        #: may free more), so that `flush` can wait for one the thread has in hand
        self._draining = threading.RLock()
        #: not empty once the interpreter exits (see `stop`)
        self._stopped: list[bool] = []
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()

    # --- the deleter ---------------------------------------------------------------------
    def release(self, address: int) -> None:
        """The deleter of every managed tensor the core builds: a box releases the tensor it
        wraps, owned memory drops its owner (and says so to `on_release`). Bound to this
        object: at interpreter exit a tensor still held by a module cleared late is released
        once module globals are None."""
        bridged = self.bridges.pop(address, None)
        if bridged is not None:
            if bridged[4]:
                self.claims.pop(bridged[4], None)  # the consumer let go of the address
            if bridged[3]:
                if self._stopped:  # at exit: left to the process's end (see `stop`)
                    return
                self.deferred.append((bridged[2], bridged[1]))  # no lock, no wait
                if not self._wake.is_set():
                    self._wake.set()
            elif bridged[2] is not None:
                bridged[2](bridged[1])
            return
        entry = self.owned.pop(address, None)
        if entry is None:
            self.stray += 1
        elif entry[-1] is not None:
            entry[-1]()

    def trampolines(self, destroy: Callable[[int], None]) -> tuple[int, int, tuple[Any, ...]]:
        """(deleter address, capsule destructor address, what keeps them alive): `release`
        and `destroy` (an unconsumed capsule's destructor) as C function pointers."""
        import ctypes

        from . import dlpack as dl

        keep = (dl.DELETER(self.release), ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(destroy))
        deleter, destructor = (ctypes.cast(f, ctypes.c_void_p).value or 0 for f in keep)
        # Never freed, not even when the interpreter clears modules at exit: a tensor still
        # held then by a module cleared later would call freed code (a segfault at exit)
        incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))
        for callback in keep:
            incref(callback)
        return deleter, destructor, keep

    def take_boxes_from(self, find: Callable[[], Any]) -> None:
        """Ask `find` for the boxes this runtime releases through: the process's hub, which
        knows the adapters (this runtime is built below them, in `interop.capsule`)."""
        self._find_boxes = find
        self._boxes = None

    def boxes(self) -> Boxes | None:
        """The boxes an adapter makes for this runtime, looked up until the answer is known."""
        found = self._boxes
        if found is None and self._find_boxes is not None:
            found = self._find_boxes()
            if found is not None:
                self._boxes = found
        return found or None

    def aligned_handler(self) -> Any:
        """NumPy's allocator hook (a NEP 49 "mem_handler" capsule) placing array data 64-byte
        aligned, or None: NumPy may call it without the GIL, so it is C or nothing
        (`interop.aligned_numpy`)."""
        return None

    # --- claims ----------------------------------------------------------------------------
    def claim(self, data: int, by: int) -> bool:
        """Claim data address `data` for the import of box `by`; False where another holds it."""
        return self.claims.setdefault(data, by) == by

    def unclaim(self, data: int) -> None:
        self.claims.pop(data, None)

    def address_claimed(self, address: int) -> bool:
        """Whether a live import into a framework that files releases by address holds it."""
        return address in self.claims

    def claimed_addresses(self) -> int:
        self.drain()  # (a claim `keep` holds lasts till its queued release is taken)
        return len(self.claims)

    # --- the deferred queue ------------------------------------------------------------------
    def keep(self, view: Any, base: Any, claimed: int) -> None:
        """Hold `base` (what keeps a producer's tensor: an adapter's box, NumPy's) until
        `view`, over it, is gone; then release it as a deferred release (claiming `claimed`
        till then, where not 0). A consumer that frees under a lock of its own drops `view`
        under that lock: its weak reference's callback, `deque.append`, runs in C, queues the
        reference and gives up no GIL there (Python code, a `__del__`, may give it to a thread
        that then waits for that lock holding it), even while an exception is raised. Nothing
        wakes the thread (it polls): conversions release it first (`drain`)."""
        ref = weakref.ref(view, self.deferred.append)
        self.kept[id(ref)] = (ref, base, claimed)

    def start(self) -> None:
        """Start the releasing thread (once), from ordinary code: never from inside a deleter,
        where the thread it waits for could block on the lock that deleter's caller holds."""
        if self._thread is None:
            with self._thread_lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="interop-deferred-release", daemon=True
                    )
                    self._thread.start()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(POLL_S)
            time.sleep(LINGER_S)  # (conversions meanwhile release what they find queued)
            self._wake.clear()  # before draining: a release queued from now on wakes it again
            self.drain()

    def _drain_queue(self, wait: float) -> None:
        """Release what is queued; where another thread is at it, return (`wait` 0) or wait
        for it up to `wait` seconds, then release what is left."""
        lock = self._draining
        if not (lock.acquire(True, wait) if wait else lock.acquire(False)):
            return  # another thread releases them now
        try:
            while self.deferred:
                try:
                    item = self.deferred.popleft()
                except IndexError:  # another thread took the last one
                    return
                if type(item) is tuple:
                    if item[0] is not None:  # (a NULL deleter: nothing to release)
                        item[0](item[1])
                else:  # a view `keep` watched is gone: its base goes (its tensor with it)
                    claimed = self.kept.pop(id(item))[2]
                    if claimed:
                        self.claims.pop(claimed, None)
                item = None
        finally:
            lock.release()

    def pending(self) -> int:
        """How many releases are queued (for tests)."""
        return len(self.deferred)

    def drain(self) -> None:
        """Release what is queued, here and now (conversions call it, outside any consumer's
        lock): in a loop of conversions into Paddle the queue then never grows, whatever the
        releasing thread's share of the GIL. A backlog is memory: 5,000 MLX -> Paddle
        conversions kept 20 MB in MLX's allocator when only the thread released them."""
        if self.deferred and not self._stopped:  # (at exit: left to the process's end)
            self._drain_queue(0)

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every deferred release has run (what `Adapter.synchronize` waits for)."""
        self._drain_queue(timeout)  # (waits for a release the thread has in hand)

    def after_fork(self) -> None:
        """In the child of a fork (`os.register_at_fork`), which has none of the parent's
        threads: the releasing thread is gone and its locks may be held for good (the exit
        would wait 10 s on them). Fresh locks, and a fresh thread where anything is queued
        (the release the thread was running at the fork is left to the process's end)."""
        self._wake = threading.Event()
        self._draining = threading.RLock()
        self._thread_lock = threading.Lock()
        started, self._thread = self._thread, None
        if started is not None and self.deferred:
            self.start()

    def stop(self) -> None:
        """At exit, while the interpreter still runs: release what is queued, wait for a
        release the thread has in hand, and release nothing deferred from then on (left to
        the process's end). A thread that takes the GIL once the interpreter finalizes is
        ended in place, and one ended inside a C++ deleter (torch's) aborts the process
        ("terminate called without an active exception"): a Paddle tensor over torch memory
        alive at exit did, 1 run in 3."""
        if self._draining.acquire(True, 10.0):
            try:
                self._stopped.append(True)
                self._drain_queue(0)
            finally:
                self._draining.release()


class CompiledReleases(Releases):
    """The twin where the accelerator is built: its trampolines run `release` keeping an
    exception being raised; deferred re-wraps, their claims and their queue are C's, released
    by a C thread with no GIL and no consumer's lock."""

    python_callbacks = False

    def __init__(self, speedups: Any) -> None:
        super().__init__(speedups.defer_release)
        self._c = speedups
        self.queued = True  # (its drain costs less than a test)

    def trampolines(self, destroy: Callable[[int], None]) -> tuple[int, int, tuple[Any, ...]]:
        deleter, destructor = self._c.trampolines(self.release)
        return deleter, destructor, ()

    def aligned_handler(self) -> Any:
        make = getattr(self._c, "aligned_handler", None)  # (None: built before it had one)
        return None if make is None else make()

    def address_claimed(self, address: int) -> bool:
        return bool(self._c.address_claimed(address))

    def claimed_addresses(self) -> int:
        return int(self._c.claimed_addresses())

    def pending(self) -> int:
        return int(self._c.deferred_pending()) + len(self.deferred)

    def drain(self) -> None:
        self._c.drain_deferred()
        super().drain()

    def flush(self, timeout: float = 10.0) -> None:
        super().flush(timeout)
        deadline = time.monotonic() + timeout
        while self._c.deferred_pending() and time.monotonic() < deadline:  # (C's queue)
            time.sleep(0.001)

    def after_fork(self) -> None:
        self._c.after_fork_child()
        super().after_fork()

    def stop(self) -> None:
        self._c.stop_releasing()
        super().stop()


def choose(speedups: Any, defer_rewrap: DeferRewrap) -> Releases:
    """The compiled twin where `speedups` (the accelerator) is given, else the pure one,
    whose deferring re-wrap is `defer_rewrap` (NumPy's box, or the core's)."""
    return CompiledReleases(speedups) if speedups is not None else Releases(defer_rewrap)
