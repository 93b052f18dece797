"""Conformance cases of the 'reduce' family."""
from __future__ import annotations


def cases():
    return []
