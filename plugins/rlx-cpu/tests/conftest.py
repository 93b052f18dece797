"""rlx-cpu tests: no background measurements behind a test's back."""
import os

import pytest

from rlx_cpu import planner


@pytest.fixture(autouse=True)
def planner_without_thread(monkeypatch):
    """The process's planner starts no thread (a background measurement would switch
    OpenBLAS's thread count under another test's runs); tests that check the planner
    make its attempts themselves."""
    quiet = planner.Planner(lambda: False, settle_s=0.0, background=False)
    monkeypatch.setattr(planner.planner, "made", (os.getpid(), quiet))
    return quiet
