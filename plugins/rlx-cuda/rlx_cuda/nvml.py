"""NVML telemetry: the provider lives in the core (``rlx_core.hw.nvml``), which reads
NVIDIA GPUs for ``rlx gpu`` with or without this plugin; re-exported here for code that
imports it from ``rlx_cuda``."""
from rlx_core.hw.nvml import NvmlProvider, read_fields

__all__ = ["NvmlProvider", "read_fields"]
