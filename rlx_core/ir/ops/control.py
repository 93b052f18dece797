"""Op kinds of the 'control' family (declared with @op; builder methods on ControlBuilders)."""
from __future__ import annotations


class ControlBuilders:
    pass
