"""Conformance cases of the 'movement' family."""
from __future__ import annotations


def cases():
    return []
