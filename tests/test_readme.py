"""README's examples run as written: each Python block, in a fresh interpreter.

A block that cannot run alone says so on the line above it (`<!-- not run: why -->`); the few
that do are listed here, so that a new one cannot be skipped silently.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(?:<!-- not run: (?P<why>[^>]*) -->\n)?```python\n(?P<code>.*?)```", re.S)
#: why each block that is not run here is not
NOT_RUN = {
    "signatures",
    "a fragment of the two-process example below",
    "two processes: tests/test_sharding.py runs it",
    "a Ray cluster: tests/test_ray.py makes the same calls on one",
}


def _blocks() -> list[tuple[str | None, str, int]]:
    text = README.read_text()
    return [
        (m.group("why"), m.group("code"), text[: m.start("code")].count("\n") + 1)
        for m in BLOCK.finditer(text)
    ]


RUN = [(code, line) for why, code, line in _blocks() if why is None]


def test_only_the_listed_blocks_are_not_run():
    assert {why for why, _, _ in _blocks() if why is not None} == NOT_RUN
    assert len(RUN) >= 4, "README has fewer runnable examples than it had"


@pytest.mark.parametrize("code", [c for c, _ in RUN], ids=[f"line{n}" for _, n in RUN])
def test_readme_example_runs_as_written(code: str, tmp_path: Path) -> None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("JAX_ENABLE_X64", None)  # as a user's program starts: x64 off
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-4000:]}"


#: internal names a reader of `str(plan)` should never meet: our adapters' modules, dunders
INTERNALS = re.compile(r"interop_\w+|__\w+__")


def test_readme_explains_are_in_a_users_words_and_details_name_the_calls() -> None:
    """The plans README prints (its first example's, its tree's), cold and once a route is
    remembered: `str()` names no adapter module or dunder; `details()` names the route's
    functions."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    import interop

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    for x in (a[::-1], a):  # (a reversed view is remembered by compiled keys only)
        for _ in range(4):  # the last explain is of a call a remembered route takes
            plan = interop.explain(x, "torch")
            assert plan.error is None and not INTERNALS.search(str(plan)), str(plan)
            interop.convert(x, "torch")
    assert "takes the route remembered" in str(plan), plan
    assert INTERNALS.search(plan.details()), plan.details()
    jnp = pytest.importorskip("jax.numpy")
    params = {"0.weight": jnp.ones((8, 4)), "1.num_batches_tracked": jnp.zeros((), "int32")}
    for _ in range(3):
        tree = interop.explain_tree(params, "torch")
        assert not INTERNALS.search(str(tree)), str(tree)
        assert all(not INTERNALS.search(str(leaf.plan)) for leaf in tree.leaves)
        interop.convert_tree(params, "torch")
