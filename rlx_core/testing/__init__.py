"""The backend conformance suite (a pytest plugin) and its cases.

Names are imported on first use (PEP 562), so that ``import rlx_core.testing.compare``
(used by ``rlx demo``) imports neither pytest nor the suite; only ``ConformanceSuite``,
``check_case`` and the pytest plugin need pytest.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

_EXPORTS = {
    "Case": "cases", "InputSpec": "cases", "all_cases": "cases", "build_case": "cases", "make_data": "cases",
    "spec": "cases", "TOLERANCES": "compare", "assert_close": "compare", "mismatch_report": "compare",
    "tolerance": "compare", "ConformanceSuite": "suite", "check_case": "suite",
}

__all__ = list(_EXPORTS)

if TYPE_CHECKING:
    from .cases import Case, InputSpec, all_cases, build_case, make_data, spec  # noqa: F401
    from .compare import TOLERANCES, assert_close, mismatch_report, tolerance  # noqa: F401
    from .suite import ConformanceSuite, check_case  # noqa: F401


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
