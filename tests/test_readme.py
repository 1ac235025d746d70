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
