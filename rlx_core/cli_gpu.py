"""``rlx gpu``: the original's GPU command -- telemetry of every GPU, once, N times or
live, and the root-only control knobs.

    rlx gpu                                    # one table of every GPU
    rlx gpu --watch                            # live until Ctrl-C (a rich table on a terminal)
    rlx gpu --json --count 5 --interval 200    # five samples, one JSON array per line
    sudo rlx gpu --device cuda --index 0 --power-cap 500

Readings come from ``rlx_core.hw`` (NVML, AMD SMI, sysfs/hwmon); a sensor that does not
report shows as ``-`` (``null`` in JSON), never 0. Control options (``--power-cap``,
``--lock-clocks``, ``--reset-clocks``, ``--fan``, ``--reset-fan``) make a one-shot run over
the selected GPUs, in the original's order (reset clocks, lock clocks, reset fan, fan,
power cap), then print a fresh table. Exit status: 0; 1 when a control request failed
(its ThermalError kind is printed: unavailable, unsupported, permission denied, out of
range, driver) or a requested GPU cannot be read; 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .errors import RlxError, ThermalError

__all__ = ["cmd_gpu", "setup_gpu"]


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _whole(minimum: int):
    """An argparse type: a whole number >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return value
    return parse


def _percent(text: str) -> float:
    value = _positive(text.strip().removesuffix("%")) if text.strip() not in ("0", "0%") else 0.0
    if value > 100:
        raise argparse.ArgumentTypeError(f"expected a fan duty of 0-100 %, got {text!r}")
    return value


def _clocks(text: str) -> tuple[float, float]:
    low, sep, high = text.partition("-")
    try:
        return (_positive(low), _positive(high)) if sep else (_positive(low),) * 2
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected MHz or MIN-MAX in MHz, got {text!r}") from None


def setup_gpu(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="all",
                   help="which GPUs: cuda (nvidia), rocm (amd), gpu (other DRM GPUs through sysfs) or all (default)")
    p.add_argument("--index", type=_whole(0), default=None, help="only GPU number N of the device")
    p.add_argument("--watch", action="store_true", help="sample until Ctrl-C (or --count samples)")
    p.add_argument("--interval", type=_positive, default=1000.0, metavar="MS",
                   help="milliseconds between samples (default 1000)")
    p.add_argument("--count", type=_whole(1), default=None,
                   help="number of samples (default 1, unbounded with --watch)")
    p.add_argument("--json", action="store_true", help="JSON: one array of readings per sample (null = not reported)")
    control = p.add_argument_group("control (root only; one-shot)")
    control.add_argument("--power-cap", type=_positive, metavar="W", help="set the power limit in watts")
    control.add_argument("--lock-clocks", type=_clocks, metavar="MHz|MIN-MAX", help="lock the graphics clock (NVIDIA)")
    control.add_argument("--reset-clocks", action="store_true", help="unlock the graphics clock")
    control.add_argument("--fan", type=_percent, metavar="PCT", help="fan duty 0-100 (%% allowed), manual control")
    control.add_argument("--reset-fan", action="store_true", help="return the fan to automatic control")


def cmd_gpu(args) -> int:
    """GPU telemetry (temperatures, power and cap, fan, clocks, utilization, memory) for
    every GPU, once or live; --power-cap/--lock-clocks/--fan and their resets change
    limits (root only)."""
    labels = _labels(args.device)  # (rlx's main reports errors: usage 2, ThermalError kinds 1)
    return _control(args, labels) if _control_actions(args) else _monitor(args, labels)


def _labels(device: str) -> list[str]:
    from .cli import _UsageError
    from .hw import telemetry_providers
    from .runtime.device import parse_device
    providers = telemetry_providers()
    if device.strip().lower() == "all":
        return sorted(providers)
    try:
        label = parse_device(device).label
    except RlxError as e:
        raise _UsageError(f"--device: {e}") from None
    if label not in providers:
        raise _UsageError(f"--device {device}: no GPU telemetry for '{label}'; choose from "
                          f"{', '.join(sorted(providers))} or all")
    return [label]


def _targets(labels: list[str], index: int | None) -> list[tuple[str, int]]:
    """(label, index) of every selected GPU; an --index that a device lacks is an error
    when that device was named alone."""
    from .hw import device_thermal_count
    from .hw.gpu import ThermalUnavailableError
    out = []
    for label in labels:
        n = device_thermal_count(label)
        if index is None:
            out += [(label, i) for i in range(n)]
        elif index < n:
            out.append((label, index))
        elif len(labels) == 1:
            raise ThermalUnavailableError(f"{label}: no GPU index {index}; the driver reports {n} GPU(s)")
    return out


def _sample(targets):
    from .hw import device_thermal
    readings = []
    for label, index in targets:
        try:
            readings.append(device_thermal(label, index))
        except ThermalError as e:
            print(f"rlx gpu: {label}:{index}: {type(e).__name__}: {e}", file=sys.stderr)
    return readings


def _monitor(args, labels) -> int:
    targets = _targets(labels, args.index)
    if not targets:
        print(_no_gpus(labels))
        return 0
    count = args.count if args.count is not None else (None if args.watch else 1)
    if args.json:
        render, live = (lambda readings: print(json.dumps([t.as_dict() for t in readings]), flush=True)), None
    else:
        live = _rich_live() if args.watch and sys.stdout.isatty() else None
        render = _plain_renderer(args.watch and sys.stdout.isatty())
    try:
        watch(lambda: _sample(targets), count, args.interval / 1000.0, render, live)
    except KeyboardInterrupt:
        pass
    return 0


def watch(sample, count: int | None, interval_s: float, render, live=None) -> int:
    """Take ``count`` samples (None: until interrupted) ``interval_s`` apart and show each
    with ``render`` -- or, given a rich ``Live``, as its table. Returns samples taken."""
    taken = 0
    if live is not None:
        with live:
            while count is None or taken < count:
                live.update(rich_table(sample()))
                taken += 1
                if count is None or taken < count:
                    time.sleep(interval_s)
        return taken
    while count is None or taken < count:
        render(sample())
        taken += 1
        if count is None or taken < count:
            time.sleep(interval_s)
    return taken


# --- tables ----------------------------------------------------------------------------------
HEADER = ["DEV", "IDX", "NAME", "TEMP", "HOTSPOT", "MEM TEMP", "POWER", "CAP", "FAN", "CLOCK", "MEM CLOCK", "UTIL",
          "MEM UTIL", "MEMORY"]


def _fmt(value, unit: str, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f} {unit}".rstrip()


def table_rows(readings) -> list[tuple]:
    """One row of text cells per reading; ``-`` for each sensor that did not report."""
    rows = []
    for t in readings:
        if t.mem_total_mib is None:
            memory = "-" if t.mem_used_mib is None else f"{t.mem_used_mib / 1024:.1f} GiB / -"
        else:
            used = "-" if t.mem_used_mib is None else f"{t.mem_used_mib / 1024:.1f}"
            memory = f"{used} / {t.mem_total_mib / 1024:.1f} GiB"
        rows.append((t.device, t.index, t.name or "-", _fmt(t.temp_c, "C"), _fmt(t.hotspot_c, "C"),
                     _fmt(t.mem_temp_c, "C"), _fmt(t.power_w, "W", 1), _fmt(t.power_cap_w, "W"),
                     _fmt(t.fan_percent, "%"), _fmt(t.clock_mhz, "MHz"), _fmt(t.mem_clock_mhz, "MHz"),
                     _fmt(t.util_percent, "%"), _fmt(t.mem_util_percent, "%"), memory))
    return rows


def _plain_renderer(clear: bool):
    from .cli import format_table

    def render(readings) -> None:
        if clear:  # a terminal without rich: redraw in place, as the original does
            sys.stdout.write("\033[H\033[2J")
        print(f"{time.strftime('%H:%M:%S')}\n{format_table(HEADER, table_rows(readings))}", flush=True)
    return render


def _rich_live():
    """A rich ``Live`` display on stdout, or None when rich is not installed."""
    try:
        from rich.live import Live
    except ImportError:
        return None
    return Live(auto_refresh=False, redirect_stdout=False)


def rich_table(readings):
    from rich.table import Table
    table = Table(title=f"rlx gpu  {time.strftime('%H:%M:%S')}")
    for name in HEADER:
        table.add_column(name, justify="left" if name in ("DEV", "NAME") else "right")
    for row in table_rows(readings):
        table.add_row(*map(str, row))
    return table


def _no_gpus(labels) -> str:
    from .hw import telemetry_providers
    from .runtime.registry import install_hint
    providers = telemetry_providers()
    reasons = "\n".join(f"  {label}: {providers[label].absence_reason() or 'none found'}" for label in labels)
    return (f"no GPU found to read:\n{reasons}\nNVIDIA GPUs are read through NVML ({install_hint('telemetry')}), "
            f"AMD GPUs through ROCm's amdsmi, others through /sys/class/drm.")


# --- control ---------------------------------------------------------------------------------
def _control_actions(args) -> list[tuple[str, object]]:
    """``[(what, fn(label, index))]`` in the original's order."""
    from . import hw
    actions = []
    if args.reset_clocks:
        actions.append(("reset clocks", hw.reset_locked_clocks))
    if args.lock_clocks is not None:
        low, high = args.lock_clocks
        actions.append((f"lock clocks {low:g}-{high:g} MHz", lambda d, i: hw.set_locked_clocks(d, i, low, high)))
    if args.reset_fan:
        actions.append(("reset fan", hw.reset_fan))
    if args.fan is not None:
        actions.append((f"fan {args.fan:g} %", lambda d, i: hw.set_fan_percent(d, i, args.fan)))
    if args.power_cap is not None:
        actions.append((f"power cap {args.power_cap:g} W", lambda d, i: hw.set_power_cap(d, i, args.power_cap)))
    return actions


def _control(args, labels) -> int:
    from .hw import power_cap_range
    from .hw.gpu import ThermalUnavailableError
    targets = _targets(labels, args.index)
    if not targets:
        raise ThermalUnavailableError(_no_gpus(labels))
    results = []
    for label, index in targets:
        where = f"{label}:{index}"
        if args.power_cap is not None and not args.json:
            try:
                allowed = power_cap_range(label, index)
            except ThermalError:
                allowed = None
            print(f"{where} power cap: allowed " + ("range not reported" if allowed is None
                                                    else f"{allowed[0]:g}-{allowed[1]:g} W"))
        for what, fn in _control_actions(args):
            try:
                fn(label, index)
                results.append({"gpu": where, "action": what, "ok": True})
                if not args.json:
                    print(f"{where} {what}: done")
            except ThermalError as e:
                results.append({"gpu": where, "action": what, "ok": False, "error": type(e).__name__,
                                "message": str(e)})
                if not args.json:
                    print(f"{where} {what}: {type(e).__name__}: {e}", file=sys.stderr)
    readings = _sample(targets)
    if args.json:
        print(json.dumps({"control": results, "gpus": [t.as_dict() for t in readings]}))
    else:
        _plain_renderer(False)(readings)
    return 0 if all(r["ok"] for r in results) else 1

