"""The ``rlx`` command. Each subcommand is a function ``cmd_<name>(args)`` registered in
``COMMANDS`` with its argument parser setup; ``rlx <name> --help`` documents it."""
from __future__ import annotations

import argparse
import sys

from .cli_run import cmd_run, setup_run

__all__ = ["main", "COMMANDS"]


def _setup_devices(p):
    p.add_argument("--json", action="store_true", help="print the backends manifest as JSON")


def cmd_devices(args) -> int:
    """List known devices, the plugin serving each, and whether it is available here."""
    from .runtime.registry import iter_entries, registry
    reg = registry()
    rows = [(e.device.label, e.name, e.plugin, "yes" if (a := e.availability()).ok else "no", a.reason)
            for e in iter_entries(reg)]
    print(format_table(["device", "backend", "plugin", "available", "detail"], rows))
    for rec in reg.plugins:
        if rec.status != "loaded":
            print(f"plugin '{rec.name}' {rec.status}: {rec.error}")
    return 0


def _setup_demo(p):
    p.add_argument("--devices", default=None, help="comma-separated devices (default: every available one)")


def cmd_demo(args) -> int:
    """Build a small transformer block, compile it on every available device, check each
    against the reference interpreter and print a table."""
    from .demo import run_demo
    return run_demo(args.devices.split(",") if args.devices else None)


COMMANDS = {
    "devices": (cmd_devices, _setup_devices),
    "demo": (cmd_demo, _setup_demo),
    "run": (cmd_run, setup_run),
}


def format_table(header: list[str], rows: list[tuple]) -> str:
    """A plain-text table with aligned columns."""
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlx", description="RLX graph compiler and runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (fn, setup) in COMMANDS.items():
        p = sub.add_parser(name, help=(fn.__doc__ or "").strip().splitlines()[0], description=fn.__doc__)
        setup(p)
    args = parser.parse_args(argv)
    return COMMANDS[args.command][0](args)


if __name__ == "__main__":
    sys.exit(main())
