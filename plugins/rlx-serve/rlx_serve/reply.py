"""What a replica answers: the outputs of one request and how they were made."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

__all__ = ["Prediction"]


@dataclass(frozen=True)
class Prediction:
    """One request's outputs (by name), the device that ran them, the replica (Serve's
    replica id and its process), the devices that failed before it (``(device, error)``:
    the router's fallback chain at work) and how often the ingress re-sent the request
    because a replica died under it."""

    outputs: dict[str, np.ndarray]
    device: str
    replica: str
    pid: int
    fallback: tuple[tuple[str, str], ...] = ()
    retries: int = 0

    def with_retries(self, retries: int) -> "Prediction":
        return replace(self, retries=retries)

    def meta(self) -> dict[str, Any]:
        """Everything but the outputs, JSON-ready."""
        return {"device": self.device, "replica": self.replica, "pid": self.pid,
                "fallback": [list(a) for a in self.fallback], "retries": self.retries}
