"""Op kinds of the 'conv' family (declared with @op; builder methods on ConvBuilders)."""
from __future__ import annotations


class ConvBuilders:
    pass
