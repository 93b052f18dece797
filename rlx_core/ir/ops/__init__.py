"""Op kind declarations, one module per family; each also holds its builder methods.

Importing this package declares every built-in op kind. ``BUILDER_MIXINS`` are the
classes whose methods ``Graph`` inherits (``g.matmul``, ``g.softmax`` ...).
"""
from .control import ControlBuilders
from .conv import ConvBuilders
from .elementwise import ElementwiseBuilders
from .fft import FftBuilders
from .linalg import LinalgBuilders
from .movement import MovementBuilders
from .nn import NnBuilders
from .quant import QuantBuilders
from .random import RandomBuilders
from .reduce import ReduceBuilders
from .sources import SourceBuilders

BUILDER_MIXINS = (SourceBuilders, ElementwiseBuilders, ReduceBuilders, MovementBuilders, LinalgBuilders,
                  NnBuilders, ConvBuilders, QuantBuilders, FftBuilders, RandomBuilders, ControlBuilders)
