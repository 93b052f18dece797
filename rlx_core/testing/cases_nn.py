"""Conformance cases of the 'nn' family."""
from __future__ import annotations


def cases():
    return []
