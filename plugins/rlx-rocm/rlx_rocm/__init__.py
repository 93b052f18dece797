"""rlx-rocm: AMD GPUs for RLX through OpenCL (pyopencl), registered through the
``rlx.backends`` entry point as the ``rocm`` device. Every kernel is generated OpenCL C."""
__version__ = "0.1.0"
