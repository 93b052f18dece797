"""Op kinds of the 'linalg' family (declared with @op; builder methods on LinalgBuilders)."""
from __future__ import annotations


class LinalgBuilders:
    pass
