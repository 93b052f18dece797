"""The ``ane`` backend: a graph compiled to a Core ML ML Program (``lower``), run by Core ML
on the compute units ``RLX_COREML_UNITS`` (or the backend option ``units``) names.

Compiling builds the program and converts it (coremltools' MIL passes, type checks and
serialization): everywhere, so a graph Core ML cannot take fails at compile time, on
Linux too. Running needs Core ML's runtime (macOS): the first run -- and the first after
``set_param``, since params are weights compiled into the model -- converts the program
with the current params and loads it; every run then feeds the inputs to
``MLModel.predict``. Off macOS ``run`` raises ``DeviceUnavailableError`` (the backend
reports itself unavailable there, so ``Session("ane")`` never gets that far).

NEVER RUN: this project has no Mac; the prediction path follows coremltools' documented
API and has not been executed.
"""
from __future__ import annotations

import platform
import sys
import threading
from typing import Mapping, Sequence

import numpy as np

from rlx_core.errors import DeviceError, DeviceUnavailableError, PolicyError
from rlx_core.ir import DType, Graph, Node
from rlx_core.runtime import Availability, Backend, CompileOptions, Device, ExecutableGraph

from .. import env
from ..plugin import ANE_BACKEND, ane_blocker, blocked
from . import support

__all__ = ["AneBackend", "AneExecutable", "resolve_units"]


def resolve_units(graph: Graph, options: CompileOptions) -> str:
    """The compute units of a compile: the backend option ``units``, else
    ``RLX_COREML_UNITS``, else ``cpu_and_ne`` for a graph computing in f16 (the Neural
    Engine computes in f16) and ``cpu_and_gpu`` otherwise."""
    chosen = options.backend.get("units")
    if chosen is not None:
        if chosen not in env.UNITS:
            raise PolicyError(f"ane backend option units={chosen!r}: expected one of {', '.join(env.UNITS)}")
        return chosen
    from_env = env.coreml_units()
    if from_env:
        return from_env
    f16 = any(s.dtype is DType.F16 for n in graph.nodes if n.kind not in ("input", "param") for s in n.outputs)
    return "cpu_and_ne" if f16 else "cpu_and_gpu"


class AneBackend(Backend):
    name = ANE_BACKEND
    device = Device("ane")
    option_names = ("units",)

    def is_available(self) -> Availability:
        no = blocked(ane_blocker)
        if no is not None:
            return no
        try:
            from .lower import coremltools
            ct = coremltools()[0]
            import coremltools.libcoremlpython  # noqa: F401  (the bridge to Core ML, built for macOS only)
        except Exception as e:
            return Availability(False, f"coremltools cannot reach Core ML here: {type(e).__name__}: {e}")
        units = env.coreml_units() or "cpu_and_ne for f16 graphs, cpu_and_gpu otherwise"
        return Availability(True, f"Core ML through coremltools {ct.__version__} on macOS {platform.mac_ver()[0]} "
                                  f"(compute units: {units})",
                            {"software": False, "coremltools": ct.__version__, "units": units})

    def supported_ops(self) -> Mapping[str, object]:
        return support.supported_ops()

    def check_node(self, node: Node) -> str | None:
        return support.check_node(node)

    def advisory_capabilities(self) -> frozenset[str]:
        return frozenset()

    def compile(self, graph: Graph, options: CompileOptions) -> "AneExecutable":
        unknown = set(options.backend) - set(self.option_names)
        if unknown:
            raise DeviceError(f"unknown {self.name} backend option(s) {sorted(unknown)}; known: units")
        return AneExecutable(graph, options, resolve_units(graph, options))


class AneExecutable(ExecutableGraph):
    capabilities = frozenset()

    def __init__(self, graph: Graph, options: CompileOptions, units: str):
        from .lower import lower
        from .validate import check_lowering, convert
        self.graph = graph
        self.options = options
        self.units = units
        self.lowered = lower(graph)
        problems = check_lowering(self.lowered)
        if problems:  # a lowering bug: say so rather than run a wrong program
            raise DeviceError(f"graph '{graph.name}': the Core ML program does not match the graph: "
                              + "; ".join(problems[:5]))
        # Converting validates the program (types, passes, serialization); it is rebuilt
        # with the params' values before the first run.
        self.model = convert(self.lowered, units) if self.lowered.program is not None else None
        self._params: dict[str, np.ndarray] = {}
        self._loaded = None
        self._lock = threading.Lock()

    def set_param(self, name: str, value: np.ndarray) -> None:
        with self._lock:
            self._params[name] = np.array(value, copy=True)
            self._loaded = None  # weights are compiled into the model: load it again

    def run(self, inputs: Mapping[str, np.ndarray], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        with self._lock:
            predicted = {}
            if self.lowered.program is not None:
                predicted = self._model().predict(self._feeds(inputs))
            results = [self._output(b, inputs, predicted) for b in self.lowered.outputs]
        if out is None:
            return results
        for dst, value in zip(out, results):
            np.copyto(dst, value)
        return list(out)

    def _model(self):
        if sys.platform != "darwin":
            raise DeviceUnavailableError(f"device 'ane': {ane_blocker()}")
        if self._loaded is None:
            from .lower import lower
            from .validate import convert
            self._loaded = convert(lower(self.graph, self._params), self.units, load=True)
        return self._loaded

    def _feeds(self, inputs) -> dict[str, np.ndarray]:
        feeds = {}
        for b in self.lowered.inputs:
            value = np.asarray(inputs[b.name])
            feeds[b.program_name] = np.ascontiguousarray(value.astype(b.mil_dtype.replace("fp", "float"))
                                                         .reshape(b.dims))
        if self.lowered.dummy_input:
            feeds[self.lowered.dummy_input] = np.zeros(1, np.float32)
        return feeds

    def _output(self, b, inputs, predicted) -> np.ndarray:
        s = b.shape
        if b.source == "program":
            value = np.asarray(predicted[b.program_name]).reshape(s.dims)
            return (value != 0) if s.dtype is DType.BOOL else value.astype(s.dtype.np)
        if b.source == "input":
            return np.array(inputs[b.name], dtype=s.dtype.np, copy=True)
        if b.source == "param":
            return np.array(self._params[b.name], dtype=s.dtype.np, copy=True)
        return np.array(b.value, dtype=s.dtype.np, copy=True)
