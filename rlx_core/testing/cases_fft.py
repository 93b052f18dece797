"""Conformance cases of the 'fft' family."""
from __future__ import annotations


def cases():
    return []
