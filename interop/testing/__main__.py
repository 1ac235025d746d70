"""`python -m interop.testing FRAMEWORK [pytest args]`: run the conformance kit on one adapter.

The one command a plugin author needs: it runs `ConformanceSuite` with `framework` set to the
adapter's name against every other installed framework, without writing a test file.
"""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

TEMPLATE = """\
from interop.testing import ConformanceSuite


class TestConformance(ConformanceSuite):
    framework = {name!r}
"""


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    name, extra = argv[0], argv[1:]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"test_conformance_{name}.py")
        with open(path, "w") as handle:
            handle.write(TEMPLATE.format(name=name))
        return int(pytest.main([path, "-p", "no:cacheprovider", "--rootdir", folder, *extra]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
