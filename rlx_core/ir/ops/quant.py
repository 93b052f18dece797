"""Op kinds of the 'quant' family (declared with @op; builder methods on QuantBuilders)."""
from __future__ import annotations


class QuantBuilders:
    pass
