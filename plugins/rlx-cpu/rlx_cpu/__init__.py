"""rlx-cpu: the host CPU backend for RLX (registered through the ``rlx.backends`` entry point)."""
__version__ = "0.1.0"
