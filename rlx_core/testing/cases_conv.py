"""Conformance cases of the 'conv' family."""
from __future__ import annotations


def cases():
    return []
