"""rlx-tpu: RLX graphs lowered to XLA through JAX (entry point ``rlx.backends``: ``tpu``).

``Device.TPU`` runs on the TPUs JAX sees. ``RLX_TPU_PLATFORM=cpu`` or ``gpu`` runs the same
XLA path on that PJRT platform instead (CI uses ``cpu``); see :mod:`rlx_tpu.platform`.
"""
__version__ = "0.1.0"
