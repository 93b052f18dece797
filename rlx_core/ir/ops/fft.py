"""Op kinds of the 'fft' family (declared with @op; builder methods on FftBuilders)."""
from __future__ import annotations


class FftBuilders:
    pass
