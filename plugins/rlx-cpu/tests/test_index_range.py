"""rlx-cpu runs the index ops in host mode (``rlx_core.ir.ops.movement``): an index
outside [-n, n) raises InputError naming the node -- an index of 2**62 used to hang
numpy's wrap mode while holding the graph's lock -- and the graph stays usable."""
import pytest
from rlx_core import Session
from rlx_core.testing.cases_movement import out_of_range_cases
from rlx_core.testing.suite import check_index_case


@pytest.mark.parametrize("case", list(out_of_range_cases()), ids=lambda c: c.id)
def test_out_of_range_indices_raise_input_error(case):
    assert check_index_case(Session("cpu"), case, timeout=20) == "host"
