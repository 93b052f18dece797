"""Reference kernels of the 'control' family."""
from __future__ import annotations
