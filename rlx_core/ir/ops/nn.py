"""Op kinds of the 'nn' family (declared with @op; builder methods on NnBuilders)."""
from __future__ import annotations


class NnBuilders:
    pass
