"""Op kind declarations, one module per family; each also holds its builder methods.

Importing this package declares every built-in op kind. ``BUILDER_MIXINS`` are the
classes whose methods ``Graph`` inherits (``g.matmul``, ``g.softmax`` ...).
"""
from .elementwise import ElementwiseBuilders
from .sources import SourceBuilders

BUILDER_MIXINS = (SourceBuilders, ElementwiseBuilders)
