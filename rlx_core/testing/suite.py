"""The backend conformance suite. A plugin runs it with a test module like::

    from rlx_core.testing import ConformanceSuite

    class TestMyDevice(ConformanceSuite):
        backend = "mydev"        # the backend under test, by name (and/or)
        device = "mydevice"      # the device it serves

(``pytest --rlx-backend=NAME`` / ``--rlx-device=LABEL`` override the class's choice).
Every case is compiled on the backend and compared with the reference interpreter,
twice with different data (so stale buffers show), once with non-contiguous inputs. A
case the backend does not claim (``supported_ops``) must be rejected by legalize at
compile time -- it is then reported as a skip naming the reason, never counted as a
pass. The runtime-contract tests (bad inputs, ``out=`` buffers) use only ops the
backend claims.

A backend under test that is missing, filtered out, failed to load or is unavailable
fails the suite, with the reason; see ``rlx_core.testing.plugin`` for the opt-ins
that turn that into skips on machines without the hardware.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ..errors import RlxError, UnsupportedOpError
from ..ir.dtypes import DType
from ..passes import optimize
from ..passes.legalize import unsupported_nodes
from ..reference import evaluate
from ..runtime import Session, registry
from .cases import Case, all_cases, build_case, make_data
from .compare import assert_close

__all__ = ["ConformanceSuite", "check_case", "check_index_case", "check_index_run", "Target", "resolve_target"]


def check_case(session: Session, case: Case, record: dict | None = None) -> None:
    """Compile ``case`` on ``session``'s backend and compare it with the reference.

    A case the backend does not support must raise ``UnsupportedOpError`` at compile
    time; it then skips (``record["outcome"] = "rejected"`` when a dict is given;
    ``record["claimed"] = None`` when the graph has no node of the case's kind).
    """
    g = build_case(case)
    if record is not None and (case.kind in ("input", "param") or case.kind not in optimize(g)[0].kinds()):
        record["claimed"] = None  # exercises the runtime, not an op (e.g. a cast to its own dtype)
    compiled = _compile_or_skip(session, g, record)
    for variant in (0, 1):
        inputs, params = make_data(case, variant)
        expected = evaluate(g, inputs, params)
        for name, value in params.items():
            compiled.set_param(name, value)
        feeds = inputs if variant == 0 else {k: _strided(v) for k, v in inputs.items()}
        got = compiled.run(feeds)
        assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(got, expected)):
            assert_close(np.asarray(a), e, g.output_shapes[i].dtype, case.tol,
                         what=f"{case.id} output {i} (data set {variant})")


def _compile_or_skip(session: Session, g, record: dict | None):
    """``g`` compiled on ``session``; a graph the backend does not claim must be rejected
    by legalize, and then skips. Claims are checked on the graph the backend receives,
    i.e. after the graph passes (which drop e.g. a transpose of a 0-d or 1-d value)."""
    bad = unsupported_nodes(optimize(g)[0], session.backend, registry().op_kernels(session.backend.name))
    if bad:
        with pytest.raises(UnsupportedOpError):
            session.compile(g)
        if record is not None:
            record["outcome"] = "rejected"
        pytest.skip(f"rejected at compile time by legalize: {bad[0][1]}")
    return session.compile(g)


def check_index_case(session: Session, case: Case, timeout: float = 60.0) -> str:
    """Run one of ``cases_movement.out_of_range_cases`` (index input ``i``) and return the
    mode the backend showed: ``"host"`` (``InputError`` naming the node and a bad index)
    or ``"device"`` (exactly the reference's result on the clamped indices). Anything
    else fails, and so does a run that does not return within ``timeout`` s. The same
    compiled graph must then still run valid indices right (no lock or state left held)."""
    g = build_case(case)
    return check_index_run(_compile_or_skip(session, g, None).run, g, case, timeout)


def check_index_run(run, g, case: Case, timeout: float = 60.0) -> str:
    """``check_index_case`` for ``run(inputs) -> outputs`` computing ``g`` (the case's
    graph) some other way, e.g. a kernel emulator."""
    from ..errors import InputError
    from ..reference.movement import clamped_indices
    node = next(n for n in g.nodes if n.kind == case.kind)
    n = g.shape_of(node.inputs[0]).dims[node.attrs["axis"]]
    inputs, _ = make_data(case)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(_outcome(run, inputs)), daemon=True)
    worker.start()
    worker.join(timeout)
    assert result, f"{case.id}: run with out-of-range indices did not return within {timeout:g} s"
    got = result[0]
    if isinstance(got, InputError):
        idx = inputs["i"]
        bad = {f"index {v} " for v in idx[(idx < -n) | (idx >= n)].tolist()}
        assert node.label in str(got) and any(b in str(got) for b in bad), \
            f"{case.id}: the InputError must name the node ({node.label}) and a bad index, got: {got}"
        mode = "host"
    elif isinstance(got, BaseException):
        raise AssertionError(f"{case.id}: out-of-range indices must raise InputError or clamp, "
                             f"got {type(got).__name__}: {got}") from got
    else:
        want = evaluate(g, {**inputs, "i": clamped_indices(inputs["i"], n)})
        for i, (a, e) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(np.asarray(a), e, err_msg=f"{case.id} output {i}: neither InputError "
                                          "nor the device mode's clamp (rlx_core.ir.ops.movement)")
        mode = "device"
    valid = {**inputs, "i": (inputs["i"] % n).astype(inputs["i"].dtype)}
    for i, (a, e) in enumerate(zip(run(valid), evaluate(g, valid))):
        np.testing.assert_array_equal(np.asarray(a), e, err_msg=f"{case.id} output {i}, valid indices after")
    return mode


def _outcome(run, inputs):
    try:
        return run(inputs)
    except BaseException as e:  # noqa: BLE001  (judged by the caller, on its thread)
        return e


def _strided(a: np.ndarray) -> np.ndarray:
    """The same values as a non-contiguous view (every other element of a larger array)."""
    if a.ndim == 0 or a.size < 2:
        return a
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    big[..., ::2] = a
    view = big[..., ::2]
    assert not view.flags.c_contiguous
    return view


# --- the backend under test ---------------------------------------------------------------
@dataclass
class Target:
    """The backend a ConformanceSuite class tests, or why it cannot be tested.

    ``problem`` is ``""`` (testable), ``"not-found"`` (no installed plugin serves it, or
    ``RLX_PLUGINS`` filtered it out), ``"load"`` (its plugin failed to import or its
    backend to start) or ``"unavailable"`` (its availability probe says no).
    """

    label: str
    session: Session | None = None
    problem: str = ""
    reason: str = ""
    _table: Any = field(default=None, repr=False)
    _kernels: Any = field(default=None, repr=False)
    _contract: Any = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.session is not None

    def claims(self, kind: str, dtype: DType) -> bool:
        """Whether the backend claims ``kind`` on ``dtype`` (its table or a plugin kernel)."""
        if kind in ("input", "param"):  # bound by the runtime, never in supported_ops
            return True
        if self._table is None:
            self._table = dict(self.session.backend.supported_ops())
            self._kernels = set(registry().op_kernels(self.session.backend.name))
        if kind not in self._table and kind not in self._kernels:
            return False
        dtypes = self._table.get(kind)
        return dtypes is None or dtype in dtypes


_TARGETS: dict = {}
_TARGETS_LOCK = threading.Lock()


def resolve_target(device: str | None, backend: str | None) -> Target:
    """The backend called ``backend`` (serving ``device`` when given), or the backend the
    registry picks for ``device``; a Target with ``problem`` set when it cannot be tested.
    Testable targets are cached per process; failures are looked up again after a
    registry reset."""
    reg = registry()  # loads entry points first: plugins may register their device kinds
    with _TARGETS_LOCK:
        hit = _TARGETS.get((device, backend))
        if hit is not None and (hit[1].ok or hit[0] is reg):
            return hit[1]
        target = _resolve(reg, device, backend)
        _TARGETS[(device, backend)] = (reg, target)
        return target


def _resolve(reg, device: str | None, backend: str | None) -> Target:
    from ..errors import DeviceError, PolicyError
    from ..runtime.device import parse_device
    wanted = f"{backend or 'the backend'} on {device or 'its device'}"
    dev = None
    if device is not None:
        try:
            dev = parse_device(device)
        except DeviceError as e:
            return _not_found(reg, wanted, str(e), backend, device)
    if backend is not None:
        found = [e for entries in reg.entries.values() for e in entries
                 if e.name == backend and (dev is None or e.device.label == dev.label)]
        if not found:
            served = ", ".join(f"{e.name} on {e.device}" for es in reg.entries.values() for e in es) or "none"
            where = f" serving device '{dev.label}'" if dev else ""
            return _not_found(reg, wanted, f"no installed plugin provides a backend named '{backend}'{where} "
                                           f"(backends here: {served})", backend, device)
        entry = found[0]
    else:
        try:
            entry = reg.entry(dev)
        except (DeviceError, PolicyError) as e:
            return _not_found(reg, wanted, str(e), backend, device)
    label = f"{entry.name} on {dev or entry.device}"
    avail = entry.availability()
    if entry.error:
        return Target(label, problem="load",
                      reason=f"backend '{entry.name}' (plugin '{entry.plugin}') failed to start: {entry.error}")
    if not avail.ok:
        return Target(label, problem="unavailable",
                      reason=f"backend '{entry.name}' (plugin '{entry.plugin}') is not available: "
                             f"{avail.reason or 'its probe says no'}")
    try:
        session = Session(dev or entry.device, backend=entry.name)
    except RlxError as e:
        return Target(label, problem="load" if entry.error else "unavailable", reason=str(e))
    return Target(label, session=session)


def _not_found(reg, label: str, message: str, backend: str | None, device: str | None) -> Target:
    """No backend to test: blame the plugin that should have served it when one failed to
    load or was filtered out (matched by entry-point or distribution name), else list
    every plugin that did not load."""
    names = {_norm(n) for n in (backend, device) if n}
    names |= {f"rlx-{n}" for n in names}
    own = [p for p in reg.plugins if p.status != "loaded" and names & {_norm(p.name), _norm(p.distribution or "")}]
    if own:
        problem = "load" if any(p.status == "failed" for p in own) else "not-found"
        return Target(label, problem=problem, reason="; ".join(_describe_plugin(p) for p in own))
    others = [_describe_plugin(p) for p in reg.plugins if p.status != "loaded" and p.error not in message]
    return Target(label, problem="not-found", reason=message + "".join(f"; {o}" for o in others))


def _describe_plugin(p) -> str:
    dist = f", {p.distribution} {p.version or ''}".rstrip() if p.distribution else ""
    what = "failed to load" if p.status == "failed" else p.status
    return f"plugin '{p.name}' ({p.origin}{dist}) {what}: {p.error}"


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


# --- the suite ----------------------------------------------------------------------------
class ConformanceSuite:
    """Subclass with ``backend = "<name>"`` and/or ``device = "<label>"``; see the module docstring."""

    device: str | None = None
    backend: str | None = None

    def test_case(self, request, rlx_target, rlx_case):
        rec = {"target": rlx_target.label, "kind": rlx_case.kind, "dtype": rlx_case.dtype.value,
               "claimed": rlx_target.claims(rlx_case.kind, rlx_case.dtype)}
        try:
            check_case(rlx_target.session, rlx_case, rec)
        finally:
            _record(request, rec)

    def test_index_out_of_range(self, rlx_target, rlx_index_case):
        """Indices outside [-n, n): InputError (host mode) or the clamp (device mode); see
        ``rlx_core.ir.ops.movement``."""
        check_index_case(rlx_target.session, rlx_index_case)

    def test_declares_its_contract(self, rlx_target):
        """name, device, supported_ops (kinds that exist, DType members) and capabilities."""
        from ..ir.schema import all_schemas
        from ..runtime.backend import CAPABILITIES, Availability
        backend, session = rlx_target.session.backend, rlx_target.session
        assert str(backend.device).split(":")[0] == session.device.label, \
            f"backend '{backend.name}' says its device is {backend.device!r}, but it serves '{session.device.label}'"
        assert isinstance(backend.is_available(), Availability), "is_available() must return an Availability"
        table = backend.supported_ops()
        schemas = all_schemas()
        problems = []
        for kind, dtypes in table.items():
            if kind not in schemas:
                problems.append(f"'{kind}' is not a declared op kind")
            elif dtypes is not None:
                wrong = [d for d in dtypes if not isinstance(d, DType)]
                if wrong:
                    problems.append(f"'{kind}': {wrong[0]!r} is a {type(wrong[0]).__name__}, not a DType "
                                    f"member (use DType.{str(wrong[0]).upper()}, or DType.of(...))")
        assert not problems, f"supported_ops() of backend '{backend.name}': " + "; ".join(problems[:5])
        unknown = set(backend.advisory_capabilities()) - set(CAPABILITIES)
        assert not unknown, f"advisory_capabilities() names unknown capabilities {sorted(unknown)}; " \
                            f"known: {', '.join(CAPABILITIES)}"

    def test_rejects_bad_inputs(self, rlx_target):
        from ..errors import InputError
        g, x_val = _contract_graph(rlx_target)
        c = rlx_target.session.compile(g)
        dims, dt = x_val.shape, x_val.dtype
        with pytest.raises(InputError, match="expected dims"):
            c.run({"x": np.zeros((dims[0] + 1,) + dims[1:], dt)})
        other = np.float64 if dt != np.float64 else np.float32
        with pytest.raises(InputError, match="expected dtype"):
            c.run({"x": np.zeros(dims, other)})
        with pytest.raises(InputError, match="missing input"):
            c.run({})
        with pytest.raises(InputError, match="no input named"):
            c.run({"x": x_val, "y": 1})

    def test_out_buffers(self, rlx_target):
        g, x_val = _contract_graph(rlx_target)
        c = rlx_target.session.compile(g)
        expected = evaluate(g, {"x": x_val})
        out = [np.empty(s.dims, s.dtype.np) for s in g.output_shapes]
        res = c.run({"x": x_val}, out=out)
        assert len(res) == len(out) and all(r is o for r, o in zip(res, out)), \
            "run(..., out=...) must return the caller's arrays"
        for i, (o, e, s) in enumerate(zip(out, expected, g.output_shapes)):
            assert_close(o, e, s.dtype, what=f"out[{i}] of {g.name}")


def _contract_graph(target: Target):
    """A small graph for the runtime-contract tests on ops the backend claims: one
    non-empty input ``x`` and (where a same-shape op is claimed) two different outputs,
    ``y = op(x)`` and ``op(y)``. Skips when the backend claims nothing usable."""
    if target._contract is None:
        target._contract = _find_contract_graph(target) or False
    if target._contract is False:
        pytest.skip(f"{target.label} claims no op kind on a single input that these tests could use")
    case, g = target._contract
    inputs, _ = make_data(case, 0)
    return g, next(iter(inputs.values()))


def _find_contract_graph(target: Target):
    from ..ir.graph import Graph
    from ..ir.node import Value
    candidates = [c for c in all_cases() if len(c.inputs) == 1 and target.claims(c.kind, c.dtype)]
    candidates.sort(key=lambda c: c.dtype is not DType.F32)  # f32 first (stable otherwise)
    for chain in (True, False):
        for case in candidates:
            s = next(iter(case.inputs.values()))
            if s.param or s.shape.rank == 0 or s.shape.size == 0:
                continue
            g = Graph(f"contract/{case.kind}")
            x = g.input("x", s.shape)
            try:
                y = case.build(g, x)
                if not isinstance(y, Value) or (chain and y.shape != s.shape):
                    continue
                g.set_outputs([y, case.build(g, y)] if chain else [y])
            except RlxError:
                continue
            if not unsupported_nodes(g, target.session.backend, registry().op_kernels(target.session.backend.name)):
                return case, g
    return None


def _record(request, rec: dict) -> None:
    """Attach a case's outcome to its report (xdist carries user_properties to the controller)."""
    import json
    request.node.user_properties.append(("rlx_conformance", json.dumps(rec)))
