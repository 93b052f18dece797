"""rlx-mlx: RLX graphs lowered to MLX (entry point ``rlx.backends``: ``mlx``).

The ``mlx`` device runs on the device MLX picks: the Metal GPU on Apple silicon, the
NVIDIA GPU with MLX's CUDA build, the host CPU with MLX's Linux CPU build
(``RLX_MLX_DEVICE=cpu`` or ``gpu`` chooses); see :mod:`rlx_mlx.platform`.
"""
import os

__version__ = "0.1.0"

# MLX runs float32 matmuls, convolutions and attention on TF32 tensor cores by default on
# NVIDIA GPUs (and M5-class Apple GPUs): 10-bit mantissas, ~1e-3 relative error, beyond the
# f32 tolerance. MLX reads MLX_ENABLE_TF32 once, at its first such operation; full f32 is
# the default here (a value set before rlx_mlx is imported is kept, and the backend then
# rejects f32 matmul-like nodes on a GPU: see ``platform.tf32_enabled``).
os.environ.setdefault("MLX_ENABLE_TF32", "0")
