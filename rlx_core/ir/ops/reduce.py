"""Op kinds of the 'reduce' family (declared with @op; builder methods on ReduceBuilders)."""
from __future__ import annotations


class ReduceBuilders:
    pass
