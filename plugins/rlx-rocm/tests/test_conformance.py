"""The backend conformance suite on rocm: an AMD GPU where there is one, else the stand-in
platform of ``conftest.py`` (PoCL in CI)."""
from rlx_core.testing import ConformanceSuite


class TestRocm(ConformanceSuite):
    device = "rocm"
