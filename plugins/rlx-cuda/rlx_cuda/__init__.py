"""rlx-cuda: the NVIDIA GPU backend for RLX, through CuPy (registered through the
``rlx.backends`` entry point). Importing this package imports no CUDA library."""
__version__ = "0.1.0"
