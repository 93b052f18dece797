"""Graph passes run between building and backend compilation."""
from .fusion import elementwise_steps
from .legalize import legalize_for_backend, node_dtype, unsupported_nodes
from .pipeline import PASSES, PassReport, optimize
from .precision import apply_precision

__all__ = ["legalize_for_backend", "unsupported_nodes", "node_dtype", "apply_precision", "elementwise_steps",
           "optimize", "PASSES", "PassReport"]
