"""``rlx serve MODEL``: the rlx-serve plugin's command (models on Ray Serve).

The command lives in ``rlx_serve.cli``; this shim imports it when ``rlx`` builds its
parser (argparse only: Ray is imported when the command runs), and without the plugin
registers a stub whose run prints the install command. The core never imports Ray.
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["cmd_serve", "setup_serve"]


def _plugin_cli():
    """``rlx_serve.cli``, or None when rlx-serve is not installed."""
    try:
        import rlx_serve.cli
    except ModuleNotFoundError as e:
        if e.name not in ("rlx_serve", "rlx_serve.cli"):
            raise
        return None
    return rlx_serve.cli


def setup_serve(p: argparse.ArgumentParser) -> None:
    cli = _plugin_cli()
    if cli is not None:
        cli.setup(p)
    else:
        p.add_argument("args", nargs=argparse.REMAINDER, help="(rlx-serve is not installed)")


def cmd_serve(args) -> int:
    """Serve a model on a local Ray Serve cluster (127.0.0.1): HTTP JSON/.npz/.npy and a
    Python handle, N replicas each holding a DeviceRouter (the rlx-serve plugin)."""
    cli = _plugin_cli()
    if cli is None:
        from .runtime.registry import install_hint
        print(f"rlx serve needs the rlx-serve plugin: {install_hint('serve')}", file=sys.stderr)
        return 2
    return cli.run(args)
