"""rlx-core's conformance suite on the toy backend: every case of a claimed kind x dtype
must match the reference; every other case must be rejected at compile time."""
from rlx_core.testing import ConformanceSuite


class TestToyConformance(ConformanceSuite):
    backend = "toy"  # pin the backend by name (another plugin could serve "toy" too)
    device = "toy"
