"""Conformance cases of the 'quant' family."""
from __future__ import annotations


def cases():
    return []
