"""AMD SMI telemetry: the provider lives in the core (``rlx_core.hw.amdsmi``), which reads
AMD GPUs for ``rlx gpu`` with or without this plugin; re-exported here for code that
imports it from ``rlx_rocm``."""
from rlx_core.hw.amdsmi import AmdSmiProvider, read_fields

__all__ = ["AmdSmiProvider", "read_fields"]
