import gc
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The conformance run covers JAX's 64-bit types; tests/test_jax.py checks both modes itself.
os.environ.setdefault("JAX_ENABLE_X64", "1")


def pytest_collection_finish(session):
    """Freeze what collection left (the frameworks' modules, the test items): the many
    `gc.collect()` of the release-once tests then scan only what tests made since, 0.3 s a
    collection less with every framework imported. Nothing a test makes is ever frozen."""
    gc.collect()
    gc.freeze()


#: test files whose tests must share one worker under pytest-xdist (`--dist loadgroup`, as
#: ci/test.sh runs): tests/test_ray.py starts one Ray cluster per worker that runs its tests
ONE_WORKER = frozenset({"tests/test_ray.py"})


@pytest.hookimpl(optionalhook=True)  # (xdist may not be installed)
def pytest_xdist_make_scheduler(config, log):
    """xdist's `loadgroup`, with each file of ONE_WORKER as one group. xdist 3.8 reads a test's
    `xdist_group` mark by renaming its node id, which pytest 9 no longer lets it do, so the
    mark alone groups nothing; the scheduler sees node ids only, hence the file list."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FilesAsGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return path if path in ONE_WORKER else super()._split_scope(nodeid)

    return FilesAsGroups(config, log)
