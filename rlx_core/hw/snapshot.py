"""What the host is: OS, CPU, caches, and whether it is thermally throttled right now.

Everything is read from files the OS exposes to unprivileged users (``/proc`` and
``/sys`` on Linux, ``sysctl`` / ``pmset`` on macOS); what cannot be read stays ``None``
(or thermal state ``unknown``) rather than a made-up number. ``root`` lets tests point
the Linux readers at a fake tree.

The fingerprint (every field except the thermal state) keys calibration caches: a
different CPU, core count or cache size means the figures measured before are stale.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
import re
import subprocess
from dataclasses import asdict, dataclass, field

__all__ = ["HwSnapshot", "ThermalState", "read_thermal", "parse_pmset_therm", "parse_size"]

NOMINAL, THROTTLED, UNKNOWN = "nominal", "throttled", "unknown"
# Cooling devices whose activity means the CPU itself is being slowed down.
_CPU_COOLING_TYPES = ("processor", "intel_powerclamp", "cpufreq")


@dataclass(frozen=True)
class ThermalState:
    """``state`` is ``nominal``, ``throttled`` or ``unknown`` (nothing readable).

    ``cpu_speed_pct``: current CPU speed as a percentage of its maximum where the OS
    reports it (macOS ``CPU_Speed_Limit``; Linux mean ``scaling_cur_freq / cpuinfo_max_freq``,
    informative only: idle cores clock down without being throttled).
    ``sched_pct``: macOS ``CPU_Scheduler_Limit``. ``max_temp_c``: hottest thermal zone.
    """

    state: str = UNKNOWN
    reason: str = ""
    cpu_speed_pct: float | None = None
    sched_pct: float | None = None
    max_temp_c: float | None = None

    @property
    def is_throttled(self) -> bool:
        return self.state == THROTTLED

    def __str__(self) -> str:
        return self.state + (f" ({self.reason})" if self.reason else "")


@dataclass(frozen=True)
class HwSnapshot:
    """The host at one moment. ``HwSnapshot.collect()``; sizes in bytes, ``None`` = not reported."""

    os: str
    arch: str
    cpu_brand: str
    total_cpus: int
    available_cpus: int
    physical_cores: int | None = None
    perf_cores: int | None = None
    l1d_bytes: int | None = None
    l2_bytes: int | None = None
    l3_bytes: int | None = None
    cache_line: int | None = None
    thermal: ThermalState = field(default_factory=ThermalState)

    @classmethod
    def collect(cls, root: str = "/") -> "HwSnapshot":
        """Read the host now (Linux from ``root``; macOS through sysctl/pmset; else basics)."""
        system = platform.system()
        total = os.cpu_count() or 1
        base = dict(os=system.lower() or "unknown", arch=platform.machine().lower() or "unknown",
                    total_cpus=total, available_cpus=_available_cpus(total))
        if system == "Linux":
            return cls(**base, **_linux_cpu(root), thermal=read_thermal(root))
        if system == "Darwin":
            return cls(**base, **_mac_cpu(), thermal=read_thermal(root))
        return cls(**base, cpu_brand=platform.processor() or "unknown")

    def fingerprint(self) -> str:
        """A stable 16-hex-digit hash of everything but the thermal state."""
        stable = {k: v for k, v in asdict(self).items() if k != "thermal"}
        return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:16]

    def is_throttled(self) -> bool:
        return self.thermal.is_throttled

    def as_dict(self) -> dict:
        return asdict(self)


def read_thermal(root: str = "/") -> ThermalState:
    """The thermal state alone (cheap enough to poll, unlike a full snapshot)."""
    system = platform.system()
    if system == "Linux":
        return _linux_thermal(root)
    if system == "Darwin":
        try:
            text = subprocess.run(["pmset", "-g", "therm"], capture_output=True, text=True, timeout=2).stdout
        except (OSError, subprocess.SubprocessError) as e:
            return ThermalState(UNKNOWN, f"pmset failed: {e}")
        return parse_pmset_therm(text)
    return ThermalState(UNKNOWN, f"no thermal reader for {system or 'this OS'}")


def parse_pmset_therm(text: str) -> ThermalState:
    """Parse ``pmset -g therm``: throttled when ``CPU_Speed_Limit`` or ``CPU_Scheduler_Limit`` < 100."""
    speed = _pmset_value(text, "CPU_Speed_Limit")
    sched = _pmset_value(text, "CPU_Scheduler_Limit")
    if speed is None and sched is None:
        if "no thermal warning level has been recorded" in text.lower():
            return ThermalState(NOMINAL, "no thermal warning recorded")
        return ThermalState(UNKNOWN, "pmset reported no CPU limits")
    limited = [f"{k} {v:g}%" for k, v in (("speed limit", speed), ("scheduler limit", sched))
               if v is not None and v < 100]
    return ThermalState(THROTTLED if limited else NOMINAL, ", ".join(limited), speed, sched)


def parse_size(text: str) -> int | None:
    """``"48K"`` -> 49152, ``"2M"`` -> 2097152, ``"64"`` -> 64; None if unparsable."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text or "", re.IGNORECASE)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


# --- Linux ------------------------------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _available_cpus(total: int) -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return total


def _linux_cpu(root: str) -> dict:
    info = _read(os.path.join(root, "proc/cpuinfo")) or ""
    brand = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                  if line.split(":", 1)[0].strip() in ("model name", "Model", "Hardware", "cpu model")
                  and ":" in line), "") or platform.processor() or "unknown"
    cores = {(m.group(1), m.group(2)) for m in
             re.finditer(r"physical id\s*:\s*(\d+).*?core id\s*:\s*(\d+)", info, re.DOTALL)}
    hybrid = _read(os.path.join(root, "sys/devices/cpu_core/cpus"))
    out = dict(cpu_brand=brand, physical_cores=len(cores) or None,
               perf_cores=_count_cpu_list(hybrid) if hybrid else len(cores) or None)
    for index in sorted(glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu0/cache/index*"))):
        level, kind = _read(f"{index}/level"), _read(f"{index}/type")
        size = parse_size(_read(f"{index}/size") or "")
        key = {("1", "Data"): "l1d_bytes", ("2", "Unified"): "l2_bytes", ("3", "Unified"): "l3_bytes"}.get(
            (level, kind))
        if key and size:
            out[key] = size
        if out.get("cache_line") is None:
            out["cache_line"] = _read_int(f"{index}/coherency_line_size")
    return out


def _count_cpu_list(text: str) -> int:
    """``"0-7,16-19"`` -> 12."""
    n = 0
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def _linux_thermal(root: str) -> ThermalState:
    """Throttled when a CPU cooling device is active or a zone is at its passive/hot trip."""
    causes, temps, readable = [], [], False
    for dev in sorted(glob.glob(os.path.join(root, "sys/class/thermal/cooling_device*"))):
        kind, state = (_read(f"{dev}/type") or "").lower(), _read_int(f"{dev}/cur_state")
        if kind.startswith(_CPU_COOLING_TYPES) and state is not None:
            readable = True
            if state > 0:
                causes.append(f"{os.path.basename(dev)} ({kind}) at state {state}/"
                              f"{_read_int(f'{dev}/max_state')}")
    for zone in sorted(glob.glob(os.path.join(root, "sys/class/thermal/thermal_zone*"))):
        milli = _read_int(f"{zone}/temp")
        if milli is None:
            continue
        readable = True
        temp = milli / 1000.0
        temps.append(temp)
        for trip in glob.glob(f"{zone}/trip_point_*_type"):
            if _read(trip) in ("passive", "hot", "critical"):
                limit = _read_int(trip.replace("_type", "_temp"))
                if limit is not None and limit > 0 and milli >= limit:
                    causes.append(f"{os.path.basename(zone)} ({_read(f'{zone}/type')}) at {temp:g} C "
                                  f">= {_read(trip)} trip {limit / 1000:g} C")
                    break
    speed = _linux_speed_pct(root)
    if causes:
        return ThermalState(THROTTLED, "; ".join(causes), speed, max_temp_c=max(temps, default=None))
    if not readable:
        return ThermalState(UNKNOWN, "no thermal zones or CPU cooling devices readable", speed)
    return ThermalState(NOMINAL, "", speed, max_temp_c=max(temps, default=None))


def _linux_speed_pct(root: str) -> float | None:
    ratios = []
    for cpu in glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu[0-9]*/cpufreq")):
        cur, top = _read_int(f"{cpu}/scaling_cur_freq"), _read_int(f"{cpu}/cpuinfo_max_freq")
        if cur and top:
            ratios.append(100.0 * cur / top)
    return round(sum(ratios) / len(ratios), 1) if ratios else None


# --- macOS ------------------------------------------------------------------------------
def _sysctl(name: str) -> str | None:
    try:
        res = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=2)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return res.stdout.strip() or None


def _mac_cpu() -> dict:
    def num(name):
        text = _sysctl(name)
        return int(text) if text and text.isdigit() else None
    return dict(cpu_brand=_sysctl("machdep.cpu.brand_string") or platform.processor() or "unknown",
                physical_cores=num("hw.physicalcpu"), perf_cores=num("hw.perflevel0.physicalcpu"),
                l1d_bytes=num("hw.l1dcachesize"), l2_bytes=num("hw.l2cachesize"),
                l3_bytes=num("hw.l3cachesize"), cache_line=num("hw.cachelinesize"))


def _pmset_value(text: str, key: str) -> float | None:
    m = re.search(rf"{key}\s*=\s*(\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else None
