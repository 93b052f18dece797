"""Conformance cases of the 'linalg' family."""
from __future__ import annotations


def cases():
    return []
