"""rlx-wgpu: GPUs through WebGPU (wgpu-py) for RLX, registered through the ``rlx.backends``
entry point as five devices: ``gpu``, ``vulkan``, ``opengl``, ``directx`` and ``webgpu``."""
__version__ = "0.1.0"
