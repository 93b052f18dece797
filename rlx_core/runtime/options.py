"""Compile options and the precision policy enum."""
from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import RlxError
from ..rng import RngOptions
from .sharding import Sharding

__all__ = ["PrecisionPolicy", "CompileOptions"]


class PrecisionPolicy(enum.Enum):
    """How float math is carried out (see ``rlx_core.passes.precision``).

    * ``declared``: every node in the dtype the graph declares (the default).
    * ``f32`` / ``f16`` / ``bf16``: every f32/f16/bf16 node computed in that dtype.
    * ``amp-f16`` / ``amp-bf16``: matmul, conv and attention in the low dtype;
      reductions, softmax, norms, exp/log and losses in f32; other ops follow their inputs.
    * ``amp-conservative``: only matmul, conv and attention in f16, their results
      widened back to f32 at once, so everything else stays f32.

    Graph inputs, params and outputs keep their declared dtypes in every policy.
    """

    DECLARED = "declared"
    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    AMP_F16 = "amp-f16"
    AMP_BF16 = "amp-bf16"
    AMP_CONSERVATIVE = "amp-conservative"

    @classmethod
    def of(cls, x: "PrecisionPolicy | str | None") -> "PrecisionPolicy":
        if x is None:
            return cls.DECLARED
        if isinstance(x, cls):
            return x
        key = str(x).strip().lower().replace("_", "-")
        key = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "always-f32": "f32",
               "always-f16": "f16", "always-bf16": "bf16", "amp": "amp-f16"}.get(key, key)
        try:
            return cls(key)
        except ValueError:
            raise RlxError(f"unknown precision policy {x!r}; expected one of "
                           f"{', '.join(p.value for p in cls)}") from None


@dataclass(frozen=True)
class CompileOptions:
    """Everything besides the graph and device that changes what ``compile`` produces.

    ``trace=None`` follows ``RLX_TRACE``. ``backend`` carries backend-specific knobs
    (documented by each plugin); unknown keys are the plugin's to reject. ``sharding``
    spreads the graph over a mesh of devices (``rlx_core.runtime.sharding``; a mapping
    of axis sizes means data parallel over its first axis); backends without the
    ``sharding`` capability reject it at compile time. ``passes`` picks the graph
    passes run before the backend compiles (``rlx_core.passes.pipeline``): None follows
    ``RLX_PASSES`` (default all), ``"none"`` turns them off, else pass names or
    ``-name`` entries; the backend compiles (and caches by) the graph they produce.
    """

    precision: PrecisionPolicy = PrecisionPolicy.DECLARED
    rng: RngOptions = field(default_factory=RngOptions)
    trace: bool | None = None
    backend: Mapping[str, Any] = field(default_factory=dict)
    sharding: Sharding | None = None
    passes: str | tuple[str, ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "precision", PrecisionPolicy.of(self.precision))
        if not isinstance(self.rng, RngOptions):
            raise RlxError(f"rng must be RngOptions, got {type(self.rng).__name__}")
        object.__setattr__(self, "backend", MappingProxyType(dict(self.backend)))
        if self.sharding is not None:
            object.__setattr__(self, "sharding", Sharding.of(self.sharding))
        if self.passes is not None:
            from ..passes.pipeline import enabled_passes
            enabled_passes(self.passes)  # a bad value fails here, naming it
            if not isinstance(self.passes, str):
                object.__setattr__(self, "passes", tuple(self.passes))

    @property
    def tracing(self) -> bool:
        if self.trace is not None:
            return self.trace
        return os.environ.get("RLX_TRACE", "").strip() not in ("", "0")

    def with_(self, **changes) -> "CompileOptions":
        return replace(self, **changes)

    def cache_key(self) -> str:
        """What the compiled artifact depends on (rng is runtime state, not part of it)."""
        key = {"precision": self.precision.value, "trace": self.tracing,
               "backend": {k: repr(v) for k, v in sorted(self.backend.items())}}
        if self.sharding is not None:
            key["sharding"] = self.sharding.key()
        return json.dumps(key, sort_keys=True)
