"""rlx-mlx: RLX graphs lowered to MLX (entry point ``rlx.backends``: ``mlx``).

The ``mlx`` device runs on the device MLX picks: the Metal GPU on Apple silicon, the
NVIDIA GPU with MLX's CUDA build, the host CPU with MLX's Linux CPU build
(``RLX_MLX_DEVICE=cpu`` or ``gpu`` chooses); see :mod:`rlx_mlx.platform`.
"""
__version__ = "0.1.0"
