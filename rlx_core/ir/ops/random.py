"""Op kinds of the 'random' family (declared with @op; builder methods on RandomBuilders)."""
from __future__ import annotations


class RandomBuilders:
    pass
