"""The wheel carries libkvready.so and the test library libkvready_testkit.so
(built by `make python`; loaded only with KVREADY_LIBRARY=testkit, for
kvready.conformance): it is a binary distribution for this platform, never a
pure-Python one."""

from setuptools import setup
from setuptools.dist import Distribution
from wheel.bdist_wheel import bdist_wheel


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """Any Python 3 on this platform: the package is ctypes over a C library."""

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
