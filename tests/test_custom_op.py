"""Custom op kinds declared by a plugin: shape rule, reference kernel, backend kernel."""
import numpy as np
import pytest

from rlx_core import Attr, CompileOptions, CustomOp, Graph, Session, evaluate, register_custom_op
from rlx_core.errors import GraphError, UnsupportedOpError
from rlx_core.ir.dtypes import FLOATS
from rlx_core.ir.shape import Shape
from rlx_core.runtime import compile_graph, hookimpl, register_backends, registry


def _rule(a, x):
    return x


def _swish_ref(x, *, beta):
    return x / (1 + np.exp(-beta * x))


SWISH = CustomOp("test.swish_beta", _rule, _swish_ref, attrs={"beta": Attr("float", 1.0)}, dtypes=FLOATS,
                 doc="x * sigmoid(beta * x)")


class SwishPlugin:
    calls = 0

    @hookimpl
    def rlx_custom_ops(self):
        return [SWISH]

    @hookimpl
    def rlx_op_kernels(self, backend):
        if backend != "cpu":
            return None

        def cpu_kernel(x, *, beta):
            SwishPlugin.calls += 1
            return _swish_ref(x, beta=beta)
        return {"test.swish_beta": cpu_kernel}


def _graph():
    g = Graph("swish")
    x = g.input("x", (5,))
    g.set_outputs([g.op("test.swish_beta", x, beta=2.0)])
    return g


def test_custom_op_via_plugin_hooks(fresh_registry):
    register_backends(SwishPlugin())
    x = np.linspace(-2, 2, 5, dtype=np.float32)
    want = _swish_ref(x, beta=2.0)
    np.testing.assert_allclose(evaluate(_graph(), {"x": x})[0], want, rtol=1e-6)
    out = Session("cpu").compile(_graph()).run({"x": x})[0]
    np.testing.assert_allclose(out, want, rtol=1e-6)
    assert SwishPlugin.calls == 1  # the plugin's kernel ran, not the reference


def test_custom_op_without_backend_kernel_is_rejected_at_compile_time(fresh_registry):
    register_custom_op(SWISH)
    cpu = registry().backend("cpu")
    # A backend that lists only "exp" and got no plugin kernel for the custom kind.
    strict = type("Strict", (type(cpu),), {"supported_ops": lambda self: {"exp": None}})()
    with pytest.raises(UnsupportedOpError, match=r"(?s)cannot run 1 node.*'test.swish_beta' is not supported"):
        compile_graph(strict, _graph(), CompileOptions())


def test_custom_op_declarations_cannot_clash():
    register_custom_op(SWISH)
    register_custom_op(SWISH)  # identical re-registration is fine
    with pytest.raises(GraphError, match="built-in kind"):
        register_custom_op(CustomOp("exp", _rule, _swish_ref))
    with pytest.raises(GraphError, match="already declared"):
        register_custom_op(CustomOp("test.swish_beta", lambda a, x: x, _swish_ref))
    assert Shape((5,)) == _graph().output_shapes[0]
