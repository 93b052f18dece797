"""Op kinds of the 'movement' family (declared with @op; builder methods on MovementBuilders)."""
from __future__ import annotations


class MovementBuilders:
    pass
