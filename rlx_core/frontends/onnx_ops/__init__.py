"""ONNX op converters, one module per family; importing this package registers them all
(see ``rlx_core.frontends.onnx`` for the converter contract)."""
from . import control, conv, elementwise, linalg, nn, quant, random, reduce, resize, rnn, signal, tensor  # noqa: F401
