"""Every ordered pair of installed frameworks through the same kit plugin authors use."""

from interop.testing import ConformanceSuite


class TestAllFrameworks(ConformanceSuite):
    framework = None
