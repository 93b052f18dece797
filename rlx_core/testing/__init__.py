"""The backend conformance suite (a pytest plugin) and its cases."""
from .cases import Case, InputSpec, all_cases, build_case, make_data, spec
from .compare import TOLERANCES, assert_close, mismatch_report, tolerance
from .suite import ConformanceSuite, check_case

__all__ = ["Case", "InputSpec", "all_cases", "build_case", "make_data", "spec", "TOLERANCES",
           "assert_close", "mismatch_report", "tolerance", "ConformanceSuite", "check_case"]
