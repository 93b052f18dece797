"""Installed-looking plugin distributions, for tests of plugin discovery (the core's
registry and plugin-contract tests; a plugin may test its own entry point the same way).

``make_dist`` writes a package plus its ``*.dist-info`` (``METADATA`` and an
``entry_points.txt`` in the ``rlx.backends`` group) -- exactly what pip installs -- so a
fresh interpreter with ``root`` on ``sys.path`` discovers it. ``REFERENCE_EXE`` is the
source of an ``ExecutableGraph`` that runs graphs with the reference interpreter, written
for a ``str.format`` template (its braces doubled); the plugin source around it imports
``evaluate`` and ``ExecutableGraph``.
"""
from __future__ import annotations

__all__ = ["REFERENCE_EXE", "make_dist"]

REFERENCE_EXE = '''
class Exe(ExecutableGraph):
    def __init__(self, graph, options):
        self.graph, self.params, self.rng = graph, {{}}, options.rng
    def set_param(self, name, value):
        self.params[name] = value
    def run(self, inputs, out=None):
        return evaluate(self.graph, inputs, self.params, rng=self.rng)
'''


def make_dist(root, dist, source, ep_name=None, version="0.3.0", package=None):
    """An installed-looking distribution ``dist`` whose ``rlx.backends`` entry point
    ``ep_name`` (default: the distribution name) is its package ``package`` (default: the
    distribution name with ``_`` for ``-``), holding ``source`` as ``__init__.py``."""
    pkg = package or dist.replace("-", "_")
    (root / pkg).mkdir(parents=True, exist_ok=True)
    (root / pkg / "__init__.py").write_text(source)
    info = root / f"{pkg}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[rlx.backends]\n{ep_name or dist} = {pkg}\n")
