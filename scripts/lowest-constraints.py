#!/usr/bin/env python3
"""Print pip constraints pinning every dependency to the floor its pyproject declares.

    python scripts/lowest-constraints.py pyproject.toml[onnx] plugins/rlx-cpu/pyproject.toml

Each argument is a pyproject.toml, optionally followed by the extras (comma-separated, in
brackets) whose requirements count too; its build-system requirements (setuptools) count
as well, so that a build without isolation can test them. For every requirement that applies on this Python
(its marker), the ``>=`` bound becomes ``name==floor``; the RLX distributions themselves
(``rlx-*``, installed from the tree) are skipped. A requirement with no ``>=`` bound is an
error: a floor that is not declared cannot be tested. Where two pyprojects declare different
floors for one package, the higher one is what an install can get, and is pinned.

Used by scripts/test-lowest.sh, so that the constraints are read from the pyprojects and
cannot drift from them. Needs ``packaging`` (and ``tomli`` before Python 3.11).
"""
from __future__ import annotations

import re
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version


def requirements(path: str, extras: list[str]) -> list[tuple[str, Requirement]]:
    with open(path, "rb") as f:
        project = tomllib.load(f)["project"]
    with open(path, "rb") as f:
        build = tomllib.load(f).get("build-system", {}).get("requires", [])
    found = [(f"{path} build-system", Requirement(r)) for r in build]
    found += [(path, Requirement(r)) for r in project.get("dependencies", [])]
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"{path}: no extra [{extra}] (has: {', '.join(sorted(optional))})")
        found += [(f"{path}[{extra}]", Requirement(r)) for r in optional[extra]]
    return found


def floors(args: list[str]) -> dict[str, tuple[Version, str]]:
    pins: dict[str, tuple[Version, str]] = {}
    errors = []
    for arg in args:
        m = re.fullmatch(r"(.+?)(?:\[([\w,-]*)\])?", arg)
        path, extras = m.group(1), [e for e in (m.group(2) or "").split(",") if e]
        for where, req in requirements(path, extras):
            name = canonicalize_name(req.name)
            if name.startswith("rlx-"):
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            lows = [Version(s.version) for s in req.specifier if s.operator == ">="]
            if not lows:
                errors.append(f"{where}: '{req}' declares no '>=' floor")
                continue
            low = max(lows)
            if name not in pins or low > pins[name][0]:
                pins[name] = (low, where)
    if errors:
        raise SystemExit("\n".join(errors))
    return pins


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    for name, (version, where) in sorted(floors(argv).items()):
        print(f"{name}=={version}  # {where}")


if __name__ == "__main__":
    main(sys.argv[1:])
