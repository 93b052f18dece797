"""Reference kernels of the 'movement' family."""
from __future__ import annotations
