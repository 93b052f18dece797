"""Conformance cases of the 'control' family."""
from __future__ import annotations


def cases():
    return []
