"""Reference kernels of the 'linalg' family."""
from __future__ import annotations
