"""``CompiledGraph.clone()`` and the capability names (issue 19, advisory capabilities).

A clone shares the compiled code and owns its buffers and params: params set on one
never reach the other, runs on both at once in threads stay correct. Backends that
cannot clone do not claim ``clone`` and raise CapabilityError. Every capability a
backend advertises is one of the known names, listed in the seed's order, and a
compiled graph's capabilities confirm what its backend advertised.
"""
import threading

import numpy as np
import pytest

from rlx_core import CapabilityError, Graph, ParamError, Session, Shape, advisory_capabilities, device_report
from rlx_core.runtime import CAPABILITIES

SEED_NAMES = ["clone", "moe", "persistent_handles", "gpu_handles", "kv_resident", "typed_io", "async_pipeline",
              "active_extent"]


@pytest.fixture
def device(any_device):
    return any_device


def _graph():
    g = Graph("clone")
    x = g.input("x", Shape((4, 8), "f32"))
    w = g.param("w", Shape((8, 8), "f32"))
    g.set_outputs([g.tanh(g.matmul(x, w))])
    return g


def _w(seed):
    return np.random.default_rng(seed).standard_normal((8, 8)).astype(np.float32) * 0.3


def _ref(x, w):
    return np.tanh(x @ w)


def test_clone_shares_code_and_owns_params(device):
    c = Session(device).compile(_graph())
    if "clone" not in c.capabilities:
        with pytest.raises(CapabilityError, match="cannot clone") as info:
            c.clone()
        assert isinstance(info.value, NotImplementedError)
        assert "clone" not in advisory_capabilities(device)
        return
    x = np.random.default_rng(9).standard_normal((4, 8)).astype(np.float32)
    with pytest.raises(ParamError, match="never set"):
        c.clone().run({"x": x})  # an unset param stays unset in the clone
    c.set_param("w", _w(1))
    twin = c.clone()
    np.testing.assert_allclose(twin.run({"x": x})[0], c.run({"x": x})[0], rtol=1e-6)  # starts with c's values
    twin.set_param("w", _w(2))
    np.testing.assert_allclose(c.run({"x": x})[0], _ref(x, _w(1)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(twin.run({"x": x})[0], _ref(x, _w(2)), rtol=1e-5, atol=1e-6)
    c.set_param("w", _w(3))
    np.testing.assert_allclose(twin.run({"x": x})[0], _ref(x, _w(2)), rtol=1e-5, atol=1e-6)
    assert twin.capabilities == c.capabilities and twin.executable is not c.executable
    shared = {"cpu": "plan", "tpu": "program", "mlx": "program"}.get(device)
    if shared:  # nothing compiled again
        assert getattr(twin.executable, shared) is getattr(c.executable, shared)


def test_clones_run_in_threads_at_once(device):
    c = Session(device).compile(_graph())
    if "clone" not in c.capabilities:
        pytest.skip(f"{device} does not claim clone (checked by test_clone_shares_code_and_owns_params)")
    c.set_param("w", _w(0))
    copies = [c.clone() for _ in range(4)]
    for i, twin in enumerate(copies):
        twin.set_param("w", _w(i + 10))
    x = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    errors = []

    def work(i, twin):
        try:
            for _ in range(50):
                np.testing.assert_allclose(twin.run({"x": x})[0], _ref(x, _w(i + 10)), rtol=1e-5, atol=1e-6)
        except Exception as e:  # reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i, t)) for i, t in enumerate(copies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]


def test_capabilities_are_known_and_ordered(device):
    caps = advisory_capabilities(device)
    assert set(caps) <= set(CAPABILITIES), set(caps) - set(CAPABILITIES)
    assert list(caps) == [n for n in CAPABILITIES if n in caps]
    compiled = Session(device).compile(_graph()).capabilities
    assert compiled <= set(CAPABILITIES)
    # what a compiled graph does, its backend advertised (wgpu may drop async_pipeline, never add)
    assert compiled <= set(caps), compiled - set(caps)


def test_the_vocabulary_starts_with_the_seeds_names():
    assert list(CAPABILITIES)[:len(SEED_NAMES)] == SEED_NAMES


def test_device_report_rows_carry_the_advisory_names(fresh_registry):
    rows = {r.label: r for r in device_report()}
    for label, row in rows.items():  # (unavailable devices' backends are not started for a report)
        if row.available:
            assert row.capabilities == advisory_capabilities(label), label
    assert "clone" in rows["cpu"].capabilities and "async_pipeline" not in rows["cpu"].capabilities


def test_no_backend_claims_what_nothing_here_implements(device):
    """moe, persistent_handles, kv_resident and active_extent have no hooks in this
    project yet: claiming them would be advertising nothing."""
    assert not {"moe", "persistent_handles", "kv_resident", "active_extent"} & set(advisory_capabilities(device))
