"""Reference kernels of the 'quant' family."""
from __future__ import annotations
