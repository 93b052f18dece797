"""Reference kernels of the 'fft' family."""
from __future__ import annotations
