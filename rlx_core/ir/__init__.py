"""The RLX intermediate representation: dtypes, shapes, op schemas and the Graph."""
from .dtypes import DType, promote
from .graph import Graph, subgraphs_of
from .node import Node, Ref, Value
from .schema import Attr, OpSchema, all_schemas, get_schema, op
from .shape import Shape, broadcast_dims, normalize_axes, normalize_axis

__all__ = ["DType", "promote", "Graph", "subgraphs_of", "Node", "Ref", "Value", "Attr", "OpSchema",
           "all_schemas", "get_schema", "op", "Shape", "broadcast_dims", "normalize_axes",
           "normalize_axis"]
