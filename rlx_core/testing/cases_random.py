"""Conformance cases of the 'random' family."""
from __future__ import annotations


def cases():
    return []
