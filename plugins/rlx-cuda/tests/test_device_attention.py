"""The attention kernels on the GPU (skipped without one): the diagnostic table of
``attention_gpu_check.py`` (every kernel on every configuration, view folding on and
off), and the attention conformance cases under each forced kernel."""
import pytest
from rlx_core import CompileOptions, Session
from rlx_core.testing.cases import all_cases
from rlx_core.testing.suite import check_case

from rlx_cuda.probe import probe

_avail = probe()
pytestmark = pytest.mark.skipif(not _avail.ok, reason=f"no CUDA device: {_avail.reason}")

_ATTENTION_CASES = [c for c in all_cases() if c.kind == "attention"]


def test_every_kernel_on_every_configuration():
    from attention_gpu_check import run
    lines = []
    failures = run(lines.append)
    assert not failures, "\n".join(lines)


@pytest.mark.parametrize("backend", [{"attention": "flash"}, {"attention": "flash", "attention_splits": 2},
                                     {"attention": "decode"}, {"attention": "decode", "attention_splits": 3}],
                         ids=["flash", "flash/splits2", "decode", "decode/splits3"])
@pytest.mark.parametrize("case", _ATTENTION_CASES, ids=[c.id for c in _ATTENTION_CASES])
def test_attention_conformance_under_each_kernel(case, backend):
    check_case(Session("cuda", options=CompileOptions(backend=backend)), case)
