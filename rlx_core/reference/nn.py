"""Reference kernels of the 'nn' family."""
from __future__ import annotations
