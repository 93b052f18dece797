"""pytest plugin (entry point ``pytest11``): parametrizes ConformanceSuite subclasses."""
from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("rlx", "RLX backend conformance")
    group.addoption("--rlx-device", default=None,
                    help="device label the ConformanceSuite runs on (overrides the class's `device`)")
    group.addoption("--rlx-kinds", default=None,
                    help="comma-separated op kinds: run only the conformance cases of these kinds")


def pytest_generate_tests(metafunc):
    if "rlx_case" in metafunc.fixturenames:
        from .cases import all_cases
        kinds = metafunc.config.getoption("--rlx-kinds")
        cases = all_cases(kinds.split(",") if kinds else None)
        metafunc.parametrize("rlx_case", cases, ids=[c.id for c in cases])


@pytest.fixture
def rlx_session(request):
    """A Session on the suite's device; skips (with the reason) where it is unavailable."""
    from ..errors import DeviceUnavailableError, PluginError
    device = request.config.getoption("--rlx-device") or getattr(request.cls, "device", None)
    if device is None:
        pytest.fail("ConformanceSuite subclass must set `device` (or pass --rlx-device)")
    try:
        return _session(device)
    except (DeviceUnavailableError, PluginError) as e:
        pytest.skip(f"device '{device}' unavailable: {e}")


_SESSIONS: dict = {}


def _session(device):
    from ..runtime import Session
    if device not in _SESSIONS:
        _SESSIONS[device] = Session(device)
    return _SESSIONS[device]
