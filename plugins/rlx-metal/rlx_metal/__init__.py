"""rlx-metal: Apple hardware for RLX, registered through the ``rlx.backends`` entry point as
two devices: ``metal`` (Apple GPUs through wgpu's Metal backend, compiled with rlx-wgpu's
code generation through its public API ``rlx_wgpu.api``) and ``ane`` (the Neural Engine
through Core ML: graphs lowered to Core ML ML Programs with coremltools' MIL builder).

Neither device has been run on Apple hardware by this project; see the README for what
is and is not verified."""
__version__ = "0.1.0"
