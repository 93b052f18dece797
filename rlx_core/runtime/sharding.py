"""Sharding: how one graph is spread over a mesh of devices (data and tensor parallelism).

The spec is plain data, free of any library: a backend that claims the ``sharding``
capability (rlx-tpu, through ``jax.sharding``) turns it into its own placements, and
every other backend rejects it at compile time (``compile_graph``).

* ``mesh``: named axes and their sizes, ``{"data": 2, "model": 4}``: the first 2 x 4
  devices of the backend's platform arranged as a 2 x 4 grid.
* ``batch_axis``: the mesh axis that splits dim 0 of every input (data parallel); params
  not named by a rule are replicated along it.
* ``params``: tensor-parallel rules, ``{glob pattern over param names: spec}`` (first
  match wins; unmatched params are replicated). A spec has one entry per leading dim of
  the param: None (not split), a mesh axis name, or a tuple of names (split over the
  product of their sizes). A column-parallel ``x @ W`` splits ``W [K, N]`` as
  ``(None, "model")`` and its bias as ``("model",)``; a row-parallel one splits ``W`` as
  ``("model", None)``, and the compiler adds the all-reduce of the partial products.
  :func:`transformer_rules` and :func:`mlp_rules` give the Megatron pairs for
  ``rlx_core.models``.
* ``inputs``: rules of the same form for inputs, taking precedence over ``batch_axis``.
* ``outputs``: ``"gathered"`` (every output whole on every device, the compiler's
  all-gather included in the program) or ``"sharded"`` (as the compiler leaves them;
  host outputs are then assembled from the shards on the host).

Every rule is checked against the graph when it is compiled (:meth:`Sharding.plan`):
a pattern that matches nothing, a spec longer than the value's rank or a dim not
divisible by its axes' devices is a :class:`ShardingError` naming the value and rule.
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import ShardingError

if TYPE_CHECKING:
    from ..ir.graph import Graph

__all__ = ["Sharding", "ShardingPlan", "OUTPUT_MODES", "column_parallel", "row_parallel", "transformer_rules",
           "mlp_rules"]

OUTPUT_MODES = ("gathered", "sharded")
Spec = tuple  # one entry per leading dim: None, a mesh axis name or a tuple of names


@dataclass(frozen=True)
class ShardingPlan:
    """A sharding applied to one graph: the spec of every param and input, by name
    (``()`` = replicated), each checked against the value's dims."""

    params: Mapping[str, Spec]
    inputs: Mapping[str, Spec]


@dataclass(frozen=True)
class Sharding:
    """See the module docstring. ``mesh`` and rule tables may be given as mappings;
    they are stored as tuples, so a Sharding is hashable (part of cache keys)."""

    mesh: Any
    batch_axis: str | None = None
    params: Any = field(default=())
    inputs: Any = field(default=())
    outputs: str = "gathered"

    def __post_init__(self):
        object.__setattr__(self, "mesh", _mesh(self.mesh))
        names = self.axis_names
        if self.batch_axis is not None and self.batch_axis not in names:
            raise ShardingError(f"batch_axis {self.batch_axis!r} is not a mesh axis; the mesh has {list(names)}")
        object.__setattr__(self, "params", _rules(self.params, names, "param"))
        object.__setattr__(self, "inputs", _rules(self.inputs, names, "input"))
        if self.outputs not in OUTPUT_MODES:
            raise ShardingError(f"outputs={self.outputs!r}; expected one of {', '.join(OUTPUT_MODES)}")

    @classmethod
    def of(cls, value: "Sharding | Mapping[str, int]") -> "Sharding":
        """``value`` itself, or for a mapping of axis sizes the mesh it describes, data
        parallel over its first axis (what ``Session(device, mesh={"data": 8})`` means)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping) and value:
            return cls(value, batch_axis=next(iter(value)))
        raise ShardingError(f"mesh must be a Sharding or a non-empty mapping of axis name -> size, "
                            f"got {type(value).__name__} {value!r}")

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.mesh)

    @property
    def axis_sizes(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.mesh)

    @property
    def devices(self) -> int:
        """How many devices the mesh spans."""
        return math.prod(self.axis_sizes)

    def plan(self, graph: "Graph") -> ShardingPlan:
        """Every param's and input's spec in ``graph``, checked (ShardingError otherwise)."""
        params = {n.attrs["name"]: tuple(n.attrs["dims"]) for n in graph.param_nodes}
        inputs = {n.attrs["name"]: tuple(n.attrs["dims"]) for n in graph.input_nodes}
        batch = () if self.batch_axis is None else (self.batch_axis,)
        planned = []
        for what, values, rules, default in (("param", params, self.params, ()), ("input", inputs, self.inputs, batch)):
            _check_every_rule_matches(graph.name, what, rules, values)
            specs = {}
            for name, dims in values.items():
                rule = next(((p, s) for p, s in rules if fnmatch.fnmatchcase(name, p)), None)
                spec = default[:len(dims)] if rule is None else rule[1]
                self._check_fits(f"{what} '{name}' {list(dims)}", dims, spec,
                                 f"rule {rule[0]!r}" if rule else f"batch_axis {self.batch_axis!r}")
                specs[name] = spec
            planned.append(specs)
        return ShardingPlan(*planned)

    def _check_fits(self, value: str, dims: tuple[int, ...], spec: Spec, source: str) -> None:
        if len(spec) > len(dims):
            raise ShardingError(f"{value}: {source} gives {len(spec)} dims {spec}, the value has {len(dims)}")
        sizes = dict(self.mesh)
        for dim, (extent, entry) in enumerate(zip(dims, spec)):
            parts = math.prod(sizes[a] for a in _axes(entry))
            if extent % parts:
                raise ShardingError(f"{value}: dim {dim} ({extent}) does not split into {parts} equal parts "
                                    f"over mesh axes {_axes(entry)} ({source}); give it another spec"
                                    + (" with an inputs rule" if value.startswith("input") else ""))

    def key(self) -> str:
        """A stable text form for cache keys."""
        return repr(self)


def column_parallel(layer: str, axis: str = "model") -> dict[str, Spec]:
    """``x @ layer.w + layer.b`` with ``w [K, N]`` split by columns: each device computes
    its slice of the N outputs, no communication."""
    return {f"{layer}.w": (None, axis), f"{layer}.b": (axis,)}


def row_parallel(layer: str, axis: str = "model") -> dict[str, Spec]:
    """``x @ layer.w + layer.b`` with ``w [K, N]`` split by rows: each device contracts its
    slice of K; the compiler all-reduces the partial products (the bias stays whole)."""
    return {f"{layer}.w": (axis, None)}


def transformer_rules(axis: str = "model", prefix: str = "") -> dict[str, Spec]:
    """Megatron-style rules for ``rlx_core.models.transformer_block`` (params named
    ``prefix + "attn.in.w"`` ...): the qkv and ffn-in projections column-parallel, the
    attention-out and ffn-out projections row-parallel (two all-reduces per block); the
    layer norms are replicated. The packed qkv weight splits by columns, so a shard
    boundary may fall inside q, k or v: XLA then moves data before the per-head product."""
    return {**column_parallel(f"{prefix}attn.in", axis), **row_parallel(f"{prefix}attn.out", axis),
            **column_parallel(f"{prefix}ffn.in", axis), **row_parallel(f"{prefix}ffn.out", axis)}


def mlp_rules(layers: int, axis: str = "model", prefix: str = "fc") -> dict[str, Spec]:
    """Rules for ``rlx_core.models.mlp`` with ``layers`` linear layers: column- and
    row-parallel in turn (one all-reduce per pair; an odd last layer is column-parallel)."""
    rules: dict[str, Spec] = {}
    for i in range(layers):
        rules |= (column_parallel if i % 2 == 0 else row_parallel)(f"{prefix}{i}", axis)
    return rules


# --- normalising ------------------------------------------------------------------------
def _mesh(value: Any) -> tuple[tuple[str, int], ...]:
    pairs = list(value.items()) if isinstance(value, Mapping) else list(value) if isinstance(value, Sequence) \
        and not isinstance(value, str) else None
    if not pairs or any(not isinstance(p, Sequence) or len(p) != 2 for p in pairs):
        raise ShardingError(f"mesh must be a non-empty mapping of axis name -> size, got {value!r}")
    names = [name for name, _ in pairs]
    for name, size in pairs:
        if not isinstance(name, str) or not name:
            raise ShardingError(f"mesh axis names must be non-empty strings, got {name!r} in {value!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ShardingError(f"mesh axis {name!r} has size {size!r}; expected an integer >= 1")
    if len(set(names)) != len(names):
        raise ShardingError(f"mesh axis names repeat: {names}")
    return tuple((name, size) for name, size in pairs)


def _rules(value: Any, axes: tuple[str, ...], what: str) -> tuple[tuple[str, Spec], ...]:
    pairs = list(value.items()) if isinstance(value, Mapping) else list(value)
    out = []
    for pair in pairs:
        if not isinstance(pair, Sequence) or len(pair) != 2 or not isinstance(pair[0], str):
            raise ShardingError(f"{what} rules map a name pattern to a spec, got {pair!r}")
        pattern, spec = pair
        if isinstance(spec, str) or not isinstance(spec, Sequence):
            raise ShardingError(f"{what} rule {pattern!r}: a spec is a tuple with one entry per dim, got {spec!r}"
                                + (f" (for the first dim write ({spec!r},))" if isinstance(spec, str) else ""))
        spec = tuple(tuple(e) if isinstance(e, list) else e for e in spec)
        used = [a for entry in spec for a in _axes(entry, pattern, what)]
        unknown = [a for a in used if a not in axes]
        if unknown:
            raise ShardingError(f"{what} rule {pattern!r} names mesh axes {unknown} the mesh lacks; "
                                f"the mesh has {list(axes)}")
        if len(set(used)) != len(used):
            raise ShardingError(f"{what} rule {pattern!r}: spec {spec} uses a mesh axis twice")
        out.append((pattern, spec))
    return tuple(out)


def _axes(entry: Any, pattern: str = "", what: str = "") -> tuple[str, ...]:
    """The mesh axes one spec entry splits its dim over."""
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    if isinstance(entry, tuple) and all(isinstance(a, str) for a in entry):
        return entry
    raise ShardingError(f"{what} rule {pattern!r}: a spec entry is None, a mesh axis name or a tuple of them, "
                        f"got {entry!r}")


def _check_every_rule_matches(graph: str, what: str, rules: tuple, names: Mapping[str, Any]) -> None:
    for pattern, _ in rules:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            raise ShardingError(f"{what} rule {pattern!r} matches no {what} of graph '{graph}'; its {what}s: "
                                f"{', '.join(names) or 'none'}")
