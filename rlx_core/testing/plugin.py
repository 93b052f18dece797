"""pytest plugin (entry point ``pytest11``) of the backend conformance suite.

It parametrizes ``ConformanceSuite`` subclasses over the conformance cases, gives them
the backend under test, and ends the run with one coverage line per backend tested.

Options (``pytest --help``, group "rlx")::

    --rlx-backend=NAME     test the backend called NAME (overrides the class's ``backend``)
    --rlx-device=LABEL     test the backend serving LABEL (overrides the class's ``device``)
    --rlx-kinds=K1,K2      run only the cases of these op kinds
    --rlx-allow-missing    a backend under test that is missing, filtered out, failed to
                           load or is unavailable skips instead of failing the run
                           (also: RLX_CONFORMANCE_ALLOW_MISSING=1)

Without an opt-in, a backend that never ran fails the run. A ``conftest.py`` may
override the ``rlx_hardware_absent`` fixture to return a reason (e.g. "no NVIDIA GPU
here") when the hardware the backend needs is absent; then the backend being
*unavailable* skips, while a plugin that fails to load still fails.

This module is imported by every pytest run in an environment with rlx-core: at its
top level it imports pytest and the standard library only.
"""
from __future__ import annotations

import json
import os

import pytest

ALLOW_MISSING_ENV = "RLX_CONFORMANCE_ALLOW_MISSING"
_CASE_PROP = "rlx_conformance"
_MISSING_PROP = "rlx_conformance_missing"


def pytest_addoption(parser):
    group = parser.getgroup("rlx", "RLX backend conformance")
    group.addoption("--rlx-backend", default=None,
                    help="name of the backend the ConformanceSuite tests (overrides the class's `backend`; "
                         "with --rlx-device, the two together replace the class's choice)")
    group.addoption("--rlx-device", default=None,
                    help="device label the ConformanceSuite runs on (overrides the class's `device`)")
    group.addoption("--rlx-kinds", default=None,
                    help="comma-separated op kinds: run only the conformance cases of these kinds")
    group.addoption("--rlx-allow-missing", action="store_true", default=False,
                    help=f"let a backend under test that is missing or unavailable skip instead of failing "
                         f"(CI jobs without the hardware; also {ALLOW_MISSING_ENV}=1)")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the xdist controller (or a plain run) reports coverage
        config.pluginmanager.register(_Coverage(), "rlx-conformance-coverage")


def pytest_generate_tests(metafunc):
    kinds = metafunc.config.getoption("--rlx-kinds")
    wanted = [k.strip() for k in kinds.split(",") if k.strip()] if kinds else None
    if "rlx_case" in metafunc.fixturenames:
        from .cases import all_cases
        cases = all_cases(wanted)
        metafunc.parametrize("rlx_case", cases, ids=[c.id for c in cases])
    if "rlx_index_case" in metafunc.fixturenames:
        from .cases_movement import out_of_range_cases
        cases = [c for c in out_of_range_cases() if wanted is None or c.kind in wanted]
        metafunc.parametrize("rlx_index_case", cases, ids=[c.id for c in cases])


@pytest.fixture
def rlx_hardware_absent():
    """Override in a conftest: a reason (str) when this machine lacks the hardware the
    backend under test needs, else None. Only then may the backend be unavailable
    without failing the run; a plugin that fails to load still fails."""
    return None


_FAILED_TARGETS: set = set()


@pytest.fixture
def rlx_target(request, rlx_hardware_absent):
    """The backend under test (``rlx_core.testing.suite.Target``); fails (or, opted in,
    skips) with the reason when it cannot be tested."""
    from .suite import resolve_target
    opt_backend = request.config.getoption("--rlx-backend")
    opt_device = request.config.getoption("--rlx-device")
    if opt_backend or opt_device:
        backend, device = opt_backend, opt_device
    else:
        backend, device = getattr(request.cls, "backend", None), getattr(request.cls, "device", None)
    if backend is None and device is None:
        pytest.fail("a ConformanceSuite subclass must set `backend` and/or `device` "
                    "(or pass --rlx-backend / --rlx-device)", pytrace=False)
    target = resolve_target(device, backend)
    if target.ok:
        return target
    allowed = _allowed(request.config, target, rlx_hardware_absent)
    request.node.user_properties.append((_MISSING_PROP, json.dumps(
        {"target": target.label, "reason": target.reason, "allowed": allowed or ""})))
    if allowed:
        pytest.skip(f"{target.label} not tested ({allowed}): {target.reason}")
    if target.label in _FAILED_TARGETS:  # one failure per process says it all; the rest skip
        pytest.skip(f"{target.label} cannot be tested (see the failure above): {target.reason}")
    _FAILED_TARGETS.add(target.label)
    hint = ""
    if rlx_hardware_absent and target.problem != "unavailable":
        hint = (f"\n(The conftest says the hardware is absent -- {rlx_hardware_absent} -- but that excuses "
                f"only an unavailable backend, not one that is {_PROBLEM[target.problem]}.)")
    pytest.fail(f"ConformanceSuite cannot test {target.label}: {_PROBLEM[target.problem]}.\n"
                f"{target.reason}\nNothing was tested.{hint} If this run is meant to lack this backend "
                f"(a CI job without the hardware), pass --rlx-allow-missing or set {ALLOW_MISSING_ENV}=1.",
                pytrace=False)


@pytest.fixture
def rlx_session(rlx_target):
    """A Session on the backend under test."""
    return rlx_target.session


_PROBLEM = {"not-found": "it is not installed or was filtered out", "load": "its plugin failed to load",
            "unavailable": "it is unavailable here"}


def _allowed(config, target, hardware_absent) -> str | None:
    if config.getoption("--rlx-allow-missing"):
        return "--rlx-allow-missing"
    if os.environ.get(ALLOW_MISSING_ENV, "").strip() not in ("", "0"):
        return f"{ALLOW_MISSING_ENV}=1"
    if hardware_absent and target.problem == "unavailable":
        return f"hardware absent: {hardware_absent}"
    return None


# --- coverage: collected from reports (on the xdist controller too) -----------------------
class _Coverage:
    """Outcomes of the suite's tests, read from their reports' user_properties (which
    xdist carries from the workers), printed at the end of the run."""

    def __init__(self):
        self.pairs: dict[str, dict[tuple[str, str], dict]] = {}
        self.cases: dict[str, dict[str, int]] = {}
        self.missing: dict[str, dict] = {}

    def add_case(self, rec: dict, outcome: str) -> None:
        pairs = self.pairs.setdefault(rec["target"], {})
        if rec["claimed"] is not None:  # None: the case ran no op of its kind
            pair = pairs.setdefault((rec["kind"], rec["dtype"]), {"claimed": rec["claimed"], "outcomes": set()})
            pair["outcomes"].add(outcome)
        counts = self.cases.setdefault(rec["target"], {})
        counts[outcome] = counts.get(outcome, 0) + 1

    def add_missing(self, rec: dict, outcome: str) -> None:
        m = self.missing.setdefault(rec["target"], {"reason": rec["reason"], "allowed": rec["allowed"],
                                                     "tests": 0, "failed": 0})
        m["tests"] += 1
        m["failed"] += outcome == "failed"

    def lines(self) -> list[str]:
        out = []
        for target in sorted(self.pairs):
            pairs = self.pairs[target].values()
            claimed = sum(p["claimed"] for p in pairs)
            failed = sum("failed" in p["outcomes"] for p in pairs)
            passed = sum("passed" in p["outcomes"] and "failed" not in p["outcomes"] for p in pairs)
            rejected = sum(p["outcomes"] == {"rejected"} for p in pairs)
            c = self.cases[target]
            out.append(f"{target}: {len(pairs)} kinds x dtypes in the suite; {claimed} claimed, {passed} passed, "
                       f"{failed} failed, {rejected} rejected at compile time ({c.get('passed', 0)} cases passed, "
                       f"{c.get('failed', 0)} failed, {c.get('rejected', 0)} rejected, {c.get('skipped', 0)} "
                       f"skipped otherwise)")
        for target in sorted(self.missing):
            m = self.missing[target]
            if m["allowed"]:
                out.append(f"{target}: NOTHING RAN ({m['tests']} tests skipped, allowed by {m['allowed']}): "
                           f"{m['reason']}")
            else:
                out.append(f"{target}: NEVER RAN, the run fails ({m['failed']} failed, {m['tests'] - m['failed']} "
                           f"skipped after the first failure): {m['reason']}")
        return out

    # --- hooks ---------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report):
        for name, value in getattr(report, "user_properties", ()):
            if name == _CASE_PROP and report.when == "call":
                rec = json.loads(value)
                self.add_case(rec, rec.get("outcome") or report.outcome)
            elif name == _MISSING_PROP and report.when == "setup":
                self.add_missing(json.loads(value), report.outcome)

    def pytest_terminal_summary(self, terminalreporter):
        lines = self.lines()
        if lines:
            terminalreporter.write_sep("-", "rlx conformance")
            for line in lines:
                terminalreporter.write_line(line)
