"""Integration tests: slow (tens of seconds: they build wheels, make venvs and run pytest
in them), still part of every CI run. Deselect locally with ``-m "not slow"``."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a slow integration test (builds wheels, runs subprocesses)")
