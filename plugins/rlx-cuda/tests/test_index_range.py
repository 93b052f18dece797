"""The index ops' device mode on rlx-cuda, run in the host emulator: indices outside
[-n, n) clamp into [0, n - 1] (``rlx_core.ir.ops.movement``). On a GPU the conformance
suite's ``test_index_out_of_range`` checks the same cases on the device."""
import shutil

import pytest
from rlx_core.testing.cases import build_case
from rlx_core.testing.cases_movement import out_of_range_cases
from rlx_core.testing.suite import check_index_run


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
@pytest.mark.parametrize("case", list(out_of_range_cases()), ids=lambda c: c.id)
def test_out_of_range_indices_clamp_under_emulation(case):
    from emulator import Emulated
    emulated = Emulated(build_case(case))
    assert check_index_run(emulated.run, emulated.graph, case) == "device"
