"""Tests of a repository script (a benchmark) import it by path: scripts are not a package,
and tests in ``tests/`` directories cannot share a helper module (pytest runs them with
``--import-mode=importlib``)."""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

__all__ = ["load_script"]


def load_script(path: Path, *, skip_missing: bool = False) -> ModuleType:
    """The Python file ``path`` executed as a module named after its stem. Where
    ``skip_missing`` and the file is absent (not in this checkout), the calling test is
    skipped instead."""
    import importlib.util
    path = Path(path)
    if skip_missing and not path.exists():
        import pytest
        pytest.skip(f"{path} is not in this checkout")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
