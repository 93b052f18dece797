"""rlx-wgpu: GPUs through WebGPU (wgpu-py) for RLX, registered through the ``rlx.backends``
entry point as five devices: ``gpu``, ``vulkan``, ``opengl``, ``directx`` and ``webgpu``.

Other distributions use rlx-wgpu's code generation through ``rlx_wgpu.api`` (the public,
documented API; everything else in this package is internal)."""
__version__ = "0.1.0"
