"""The ``rlx`` command. Each subcommand is a function ``cmd_<name>(args)`` registered in
``COMMANDS`` with its argument parser setup; ``rlx <name> --help`` documents it.

Exit status: 0 on success, 1 when the work itself failed (e.g. no device could run a
benchmark), 2 on a usage or configuration error (bad arguments, bad ``RLX_*`` variable).
"""
from __future__ import annotations

import argparse
import json
import sys

from .cli_gpu import cmd_gpu, setup_gpu
from .cli_run import cmd_run, setup_run
from .cli_serve import cmd_serve, setup_serve

__all__ = ["main", "COMMANDS"]


# --- rlx devices ------------------------------------------------------------------------------
def _setup_devices(p):
    p.add_argument("--json", action="store_true", help="print the manifest and the report as JSON")
    p.add_argument("--graph", default=None,
                   help="check this graph too: a workload (see `rlx bench --list`) or a graph .json file")
    p.add_argument("--probe", choices=("cheap", "full"), default="full",
                   help="availability probe: full (default; asks each installed backend's driver, so "
                        "'available yes' means is_available() passed) or cheap (the plugins' cheap probes only; "
                        "a device whose cheap probe passes shows 'maybe')")
    p.add_argument("--all", action="store_true", help="also list devices no installed plugin serves")


def cmd_devices(args) -> int:
    """Installed plugins, then one row per device: available, allowed by the policy (RLX_*
    variables), supports the graph, cost-model estimate, and each blocker with its fix."""
    from .select import BackendsManifest, DevicePolicy, device_report
    policy = DevicePolicy.from_env()
    graph = _load_graph(args.graph) if args.graph else None
    manifest = BackendsManifest.current()
    if not args.json:  # first, so that they show even if the report below raises (a bad RLX_* value)
        print(f"rlx-core {manifest.core_version} (python {manifest.python}, {manifest.platform}, plugin API "
              f"{manifest.plugin_api}); policy: {policy.describe()}")
        _print_plugins(manifest)
    rows = device_report(graph, policy, probe=args.probe)
    cheap = args.probe == "cheap"
    if args.json:
        print(json.dumps({"manifest": manifest.to_dict(), "policy": policy.describe(), "probe": args.probe,
                          "report": [_candidate_dict(r, cheap) for r in rows]}, indent=2))
        return 0
    _print_report(rows, args.all, cheap)
    return 0


def _print_plugins(manifest) -> None:
    from .runtime.registry import install_hint
    print("plugins:")
    for p in manifest.plugins:
        served = ", ".join(sorted({b.device for b in p.backends})) or "-"
        dist = f"{p.distribution} {p.version}" if p.distribution else p.origin
        api = "-" if p.api is None else str(p.api)
        print(f"  {p.name:<10} {dist:<20} {p.status:<8} api {api:<2} serves {served}"
              + (f"  ({p.error})" if p.error else "") + (f"  [{p.note}]" if p.note else ""))
    if not manifest.plugins:
        print(f"  none installed: {install_hint('cpu')}")
    if manifest.warnings:
        print("\nwarnings (RLX_* plugin variables):")
        for w in manifest.warnings:
            print(f"  {w}")


def _print_report(rows, show_all: bool, cheap: bool = False) -> None:
    from .runtime.registry import registry
    reg = registry()
    # A device whose installed plugin failed to load is listed (with the error), not hidden.
    unloaded = {r.label: reg.unloaded_plugin_for(r.label) for r in rows if not r.registered}
    failed = {label for label, rec in unloaded.items() if rec is not None and rec.status == "failed"}
    shown = [r for r in rows if r.registered or show_all or r.label in failed]

    def blocker_word(r) -> str:
        rec = unloaded.get(r.label)
        if rec is not None:
            return "plugin failed" if rec.status == "failed" else "plugin not loaded"
        return _BLOCKER_WORDS.get(r.blocker_kind, "-")

    print("\n" + format_table(
        ["device", "backend", "available", "blocker", "supports graph", "est. run", "figures", "pick",
         "capabilities"],
        [(r.label, r.backend or "-", _available(r, cheap), blocker_word(r),
          _yes(r.supports_graph), _duration(r.estimate_ns), r.figures or "-", "*" if r.recommended else "",
          ",".join(r.capabilities) or "-") for r in shown]))
    if cheap and any(_available(r, cheap) == "maybe" for r in shown):
        print("\navailable 'maybe': only the cheap probe ran (the backend's packages are importable); "
              "`rlx devices` (--probe full, the default) asks the driver")
    details = [r for r in shown if r.available and r.detail]
    if details:
        print("\ndetails (adapter, driver, platform):")
        for r in details:
            print(f"  {r.label}: {r.detail}")
    nominal = [r.label for r in shown if r.figures == "nominal"]
    if nominal:
        print(f"\nestimates for {', '.join(nominal)} use nominal figures (no calibration cached): run "
              f"`rlx calibrate` for measured ones; device selection calibrates on its own when it has a choice")
    hidden = [r.label for r in rows if r not in shown]
    disabled = [label for label in hidden if unloaded.get(label) is not None]
    if disabled:
        print(f"\nnot loaded (their plugins are installed but not listed in RLX_PLUGINS; --all lists them): "
              f"{', '.join(disabled)}")
    absent = [label for label in hidden if label not in disabled]
    if absent:
        print(f"\nnot installed (no plugin serves them; --all lists them): {', '.join(absent)}")
    blocked = [r for r in shown if r.blocker]
    if blocked:
        print("\nblockers:")
        for r in blocked:
            print(f"  {r.label}: {r.blocker}\n      fix: {r.fix}")


_BLOCKER_WORDS = {"unregistered": "not installed", "unavailable": "unavailable", "policy": "policy",
                  "unsupported": "unsupported ops"}


def _available(row, cheap: bool) -> str:
    """yes/no; 'maybe' where only the cheap probe passed (it cannot tell whether the driver works)."""
    if cheap and row.available and row.registered:
        return "maybe"
    return _yes(row.available)


def _candidate_dict(row, cheap: bool = False) -> dict:
    # "available": null where only the cheap probe ran and passed (unknown, not yes)
    available = None if cheap and row.available and row.registered else row.available
    return {"device": row.label, "registered": row.registered, "available": available,
            "supports_graph": row.supports_graph, "recommended": row.recommended,
            "blocker_kind": row.blocker_kind, "blocker": row.blocker,
            "fix": row.fix, "capabilities": list(row.capabilities), "backend": row.backend, "plugin": row.plugin,
            "detail": row.detail, "estimate_ns": row.estimate_ns, "figures": row.figures}


# --- rlx calibrate ----------------------------------------------------------------------------
def _setup_calibrate(p):
    p.add_argument("devices", nargs="*", help="devices to calibrate (default: every available one)")
    p.add_argument("--force", action="store_true", help="measure again even if a valid cache file exists")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")


def cmd_calibrate(args) -> int:
    """Measure each device's throughput and overheads for the cost model (cached under
    $XDG_CACHE_HOME/rlx; --force re-measures) and print them."""
    from .select import available_devices, calibrate, load_calibration, parse_device_list, progress_reporter
    devices = list(parse_device_list(args.devices, "rlx calibrate")) if args.devices else available_devices()
    results, failed = [], []
    for dev in devices:
        bar = ProgressBar(f"{dev}", sys.stderr)
        cached = None if args.force else load_calibration(dev)
        try:
            with progress_reporter(bar.update):
                calib = cached or calibrate(dev, force=args.force)
        except Exception as e:  # one device failing must not hide the others' figures
            bar.finish(f"failed: {type(e).__name__}: {e}")
            failed.append(dev)
            continue
        bar.finish("cached" if cached else f"measured in {calib.measured_s:.2f} s")
        results.append((calib, "cached" if cached else "measured"))
    if args.json:
        print(json.dumps([json.loads(c.to_json()) for c, _ in results], indent=2))
    elif results:
        from .select import calibration_path
        print(format_table(
            ["device", "backend", "sgemm GFLOP/s", "vector GFLOP/s", "memory GB/s", "roundtrip", "dispatch",
             "transfer GB/s", "host load", "source"],
            [(c.device, c.backend, f"{c.sgemm_gflops:.1f}", f"{c.vector_gflops:.1f}", f"{c.memory_bw_gbps:.1f}",
              _duration(c.roundtrip_overhead_ns), _duration(c.dispatch_overhead_ns),
              f"{c.transfer_bw_gbps:.1f}" if c.transfer_bw_gbps else "-",
              "-" if c.host_load is None else f"{c.host_load:.2f}", how) for c, how in results]))
        for c, how in results:
            print(f"  {c.device}: {calibration_path(c.backend, c.device)}")
            print(f"    {_provenance(c, how)}")
    if not devices:
        print("no available device to calibrate (see `rlx devices`)", file=sys.stderr)
    return 1 if failed or not devices else 0


def _provenance(calib, how: str) -> str:
    """Which figures were measured now and which were read from a cache (rlx's own, or a
    plugin's tuning file), e.g. ``measured: sgemm_gflops, ...; read from <file>: ...``."""
    if how == "cached":
        return "every figure read from this file (--force measures them again)"
    groups: dict[str, list[str]] = {}
    for name, source in calib.sources.items():
        groups.setdefault(source, []).append(name)
    return "; ".join(f"{source}: {', '.join(names)}" for source, names in sorted(groups.items())) or "measured"


# --- rlx bench --------------------------------------------------------------------------------
def _setup_bench(p):
    p.add_argument("--graph", default="chain:262144:16",
                   help="a workload spec (default chain:262144:16; see --list) or a graph .json file")
    p.add_argument("--list", action="store_true", help="list the built-in workloads and exit")
    p.add_argument("--runs", type=int, default=20, help="timed runs per device (default 20)")
    p.add_argument("--devices", default=None, help="devices to time (default: every viable one)")
    p.add_argument("--plot", default=None, metavar="PNG", help="also draw a bar chart (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def cmd_bench(args) -> int:
    """Time a graph on every viable device next to the cost model's estimate and the
    automatic pick (the RLX_* policy, as `rlx run` and the API pick); optional plot."""
    from .select import DevicePolicy, GraphDevices, estimate_device_ns, parse_device_list
    from .select.workloads import random_feeds, workload_names
    if args.list:
        for usage in workload_names().values():
            print(f"  {usage}")
        return 0
    if args.runs < 1:
        raise _UsageError(f"--runs must be >= 1, got {args.runs}")
    graph = _load_graph(args.graph)
    inputs, params = random_feeds(graph)
    runner = GraphDevices(graph, DevicePolicy.from_env())
    runner.set_params(params)
    devices = list(parse_device_list(args.devices, "--devices")) if args.devices else None
    pick = runner.pick()  # before measuring: what a run would get now (hint, RLX_DEVICE or the cost model)
    results = runner.benchmark(inputs, args.runs, devices)
    estimates = {r.device: estimate_device_ns(graph, r.device) for r in results}
    if args.json:
        print(json.dumps([{"device": r.label, "median_ns": r.median_ns, "min_ns": r.min_ns, "runs": r.runs,
                           "compile_ns": r.compile_ns, "estimate_ns": estimates.get(r.device),
                           "picked": r.device == pick.device, "error": r.error} for r in results], indent=2))
    else:
        print(f"graph '{graph.name}': {len(graph)} nodes, {args.runs} runs per device")
        print(f"pick: {pick.device} ({pick.reason})")
        print(format_table(["device", "median", "min", "compile", "cost model", "pick", "note"],
                           [(r.label, _duration(r.median_ns), _duration(r.min_ns), _duration(r.compile_ns),
                             _duration(estimates.get(r.device)), "*" if r.device == pick.device else "",
                             r.error or ("fastest" if i == 0 else "")) for i, r in enumerate(results)]))
    if args.plot:
        _plot(graph.name, results, estimates, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0 if any(r.ok for r in results) else 1


def _plot(title: str, results, estimates: dict, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from .runtime.registry import install_hint
        raise _UsageError(f"--plot needs matplotlib: {install_hint('plot')}") from None
    ok = [r for r in results if r.ok]
    labels = [r.label for r in ok]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(ok) + 2), 3.5))
    ax.bar(labels, [r.median_ns / 1e3 for r in ok], color="tab:blue", label="measured median")
    marks = [(r.label, estimates[r.device] / 1e3) for r in ok if r.device in estimates]
    if marks:
        ax.scatter([m[0] for m in marks], [m[1] for m in marks], color="tab:red", marker="_", s=600,
                   linewidths=3, label="cost model", zorder=3)
    ax.set_ylabel("time per run (us)")
    ax.set_title(f"rlx bench: {title}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- rlx demo (from the core issue) ---------------------------------------------------------------
def _setup_demo(p):
    p.add_argument("--devices", default=None, help="comma-separated devices (default: every available one)")


def cmd_demo(args) -> int:
    """Build a small transformer block, compile it on every available device, check each
    against the reference interpreter and print a table."""
    from .demo import run_demo
    return run_demo(args.devices.split(",") if args.devices else None)


COMMANDS = {
    "devices": (cmd_devices, _setup_devices),
    "calibrate": (cmd_calibrate, _setup_calibrate),
    "bench": (cmd_bench, _setup_bench),
    "demo": (cmd_demo, _setup_demo),
    "run": (cmd_run, setup_run),
    "gpu": (cmd_gpu, setup_gpu),
    "serve": (cmd_serve, setup_serve),
}


# --- shared helpers ---------------------------------------------------------------------------
class _UsageError(Exception):
    """A bad argument: reported on stderr with exit status 2."""


def _load_graph(spec: str):
    """A workload spec (``chain:65536:8``) or a path to a graph saved with ``Graph.to_json``."""
    from .errors import RlxError
    from .ir import Graph
    from .select.workloads import build
    try:
        if spec.endswith(".json"):
            with open(spec) as f:
                return Graph.from_json(f.read())
        return build(spec)
    except (OSError, RlxError) as e:
        raise _UsageError(f"cannot use graph {spec!r}: {e}") from None


def _yes(flag) -> str:
    return "-" if flag is None else "yes" if flag else "no"


def _duration(ns) -> str:
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


class ProgressBar:
    """A one-line progress bar on a terminal; plain lines when the stream is not a TTY."""

    def __init__(self, label: str, stream, width: int = 24):
        self.label, self.stream, self.width = label, stream, width
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self._last = None

    def update(self, fraction: float, message: str = "") -> None:
        filled = int(round(fraction * self.width))
        line = f"{self.label:<8} [{'#' * filled}{'.' * (self.width - filled)}] {fraction:4.0%}  {message}"
        if self.tty:
            self.stream.write("\r" + line.ljust(79))
            self.stream.flush()
        elif message != self._last:
            self.stream.write(line + "\n")
        self._last = message

    def finish(self, message: str) -> None:
        self.update(1.0, message)
        if self.tty:
            self.stream.write("\n")


def format_table(header: list[str], rows: list[tuple]) -> str:
    """A plain-text table with aligned columns."""
    cells = [list(map(str, header))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def main(argv: list[str] | None = None) -> int:
    from .errors import PolicyError, RlxError
    parser = argparse.ArgumentParser(prog="rlx", description="RLX graph compiler and runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (fn, setup) in COMMANDS.items():
        p = sub.add_parser(name, help=(fn.__doc__ or "").strip().splitlines()[0], description=fn.__doc__)
        setup(p)
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command][0](args)
    except (_UsageError, PolicyError) as e:
        print(f"rlx {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RlxError as e:
        print(f"rlx {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
