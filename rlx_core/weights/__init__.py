"""Weight files: the seed's ``WeightLoader`` protocol and loaders for safetensors, GGUF
and numpy ``.npz`` files, and ``load_weights``, which sets every param of a compiled
graph from one of them -- or, when any tensor is missing, extra or of the wrong dims or
dtype, sets none and says which.

    compiled.load_weights("model.safetensors")                  # memory-mapped, no copy
    compiled.load_weights(GGUFLoader("model.gguf"), rename={"token_embd.weight": "wte"})

``safetensors`` and ``gguf`` are imported when a file of theirs is opened
(``pip install "rlx-core[weights]"``).
"""
from .base import BytesWeightLoader, TensorInfo, WeightLoader, WeightsError
from .files import NpzLoader, SafetensorsLoader, open_weights
from .gguf import BLOCK_FORMATS, GGUFLoader, block_param
from .load import WeightMismatchError, load_weights, read_weights

__all__ = ["WeightLoader", "TensorInfo", "BytesWeightLoader", "SafetensorsLoader", "GGUFLoader", "NpzLoader",
           "open_weights", "load_weights", "read_weights", "block_param", "BLOCK_FORMATS", "WeightsError",
           "WeightMismatchError"]
