"""GPU telemetry from Linux sysfs: DRM cards and their hwmon sensors, no library needed.

Serves GPUs that no vendor library reads here -- amdgpu without ROCm's ``amdsmi``,
Intel i915/xe, nouveau -- through the files every Linux driver exports:

* ``/sys/class/drm/cardN/device/{vendor,device}``: the PCI ids; the vendor picks the
  device label (NVIDIA -> ``cuda``, AMD -> ``rocm``, Intel -> ``gpu``; virtual and BMC
  display adapters are not GPUs and are skipped);
* ``device/hwmon/hwmonM/``: ``temp*_input`` (millidegrees; ``temp*_label`` says which
  sensor: edge/gpu/pkg, junction/hotspot, mem/vram), ``power1_average`` or
  ``power1_input`` and ``power1_cap`` (+ ``_min``/``_max``; microwatts), ``pwm1`` /
  ``pwm1_max`` (fan duty, 255 unless stated) with ``pwm1_enable`` (1 manual, 2 automatic),
  ``freq*_input`` labelled sclk/mclk (Hz);
* amdgpu's ``gpu_busy_percent``, ``mem_busy_percent``, ``mem_info_vram_used``/``_total``
  (bytes), ``product_name``; i915's ``gt_cur_freq_mhz``.

A file that is absent or unreadable is a sensor that did not report (``None``). Control
writes ``power1_cap`` and ``pwm1``/``pwm1_enable`` (root only): a missing file is
``ThermalUnsupportedError``, EACCES/EPERM ``ThermalPermissionError``, any other OS error
``ThermalDriverError`` with its errno.
"""
from __future__ import annotations

import re
from pathlib import Path

from .gpu import (GpuTelemetryProvider, GpuThermal, ThermalDriverError, ThermalPermissionError,
                  ThermalUnavailableError, ThermalUnsupportedError)

__all__ = ["SysfsProvider", "VENDOR_DEVICES"]

VENDOR_DEVICES = {"0x10de": "cuda", "0x1002": "rocm", "0x8086": "gpu"}
_CARD = re.compile(r"card(\d+)$")
_TEMP_ROLES = {"edge": "temp_c", "gpu": "temp_c", "pkg": "temp_c", "junction": "hotspot_c", "hotspot": "hotspot_c",
               "mem": "mem_temp_c", "vram": "mem_temp_c"}


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _number(path: Path, scale: float = 1.0) -> float | None:
    text = _text(path)
    try:
        return None if text is None else float(text) * scale
    except ValueError:
        return None


class SysfsProvider(GpuTelemetryProvider):
    """The DRM cards of one device label under ``root`` (``/sys``; tests pass a tree of
    their own)."""

    def __init__(self, device: str, root: "str | Path" = "/sys"):
        self.device = device
        self.root = Path(root)

    def cards(self) -> list[Path]:
        """This label's cards, by card number."""
        drm = self.root / "class" / "drm"
        try:
            entries = list(drm.iterdir())
        except OSError:
            return []
        found = []
        for entry in entries:
            m = _CARD.match(entry.name)
            if m and VENDOR_DEVICES.get((_text(entry / "device" / "vendor") or "").lower()) == self.device:
                found.append((int(m.group(1)), entry))
        return [path for _, path in sorted(found)]

    def count(self) -> int:
        return len(self.cards())

    def absence_reason(self) -> str | None:
        return None if self.cards() else f"no {self.device} card under {self.root / 'class' / 'drm'}"

    def read(self, index: int) -> GpuThermal:
        card = self._card(index)
        dev, hw = card / "device", self._hwmon(card)
        fields = {"name": self._name(dev, hw)}
        fields.update(self._temps(hw))
        fields["power_w"] = _number(hw / "power1_average", 1e-6) if (hw / "power1_average").exists() \
            else _number(hw / "power1_input", 1e-6)
        fields["power_cap_w"] = _number(hw / "power1_cap", 1e-6)
        fields["fan_percent"] = self._fan(hw)
        clocks = self._freqs(hw)
        fields["clock_mhz"] = clocks.get("sclk", _number(card / "gt_cur_freq_mhz"))
        fields["mem_clock_mhz"] = clocks.get("mclk")
        fields["util_percent"] = _number(dev / "gpu_busy_percent")
        fields["mem_util_percent"] = _number(dev / "mem_busy_percent")
        fields["mem_used_mib"] = _number(dev / "mem_info_vram_used", 1 / 2**20)
        fields["mem_total_mib"] = _number(dev / "mem_info_vram_total", 1 / 2**20)
        return GpuThermal(device=self.device, index=index, **fields)

    # --- control ----------------------------------------------------------------------------
    def power_cap_range(self, index: int):
        hw = self._hwmon(self._card(index))
        low, high = _number(hw / "power1_cap_min", 1e-6), _number(hw / "power1_cap_max", 1e-6)
        return None if low is None or high is None else (low, high)

    def set_power_cap(self, index: int, watts: float) -> None:
        self._write(self._hwmon(self._card(index)) / "power1_cap", int(round(watts * 1e6)), index, "power cap")

    def set_fan_percent(self, index: int, percent: float) -> None:
        hw = self._hwmon(self._card(index))
        top = _number(hw / "pwm1_max") or 255.0
        self._write(hw / "pwm1_enable", 1, index, "fan control")
        self._write(hw / "pwm1", int(round(percent * top / 100.0)), index, "fan speed")

    def reset_fan(self, index: int) -> None:
        self._write(self._hwmon(self._card(index)) / "pwm1_enable", 2, index, "fan control")

    # --- helpers ------------------------------------------------------------------------------
    def _card(self, index: int) -> Path:
        cards = self.cards()
        if not 0 <= index < len(cards):
            raise ThermalUnavailableError(f"{self.device}:{index}: sysfs lists {len(cards)} {self.device} GPU(s)")
        return cards[index]

    @staticmethod
    def _hwmon(card: Path) -> Path:
        try:
            return min((card / "device" / "hwmon").iterdir())
        except (OSError, ValueError):
            return card / "device" / "hwmon" / "absent"  # every sensor then reads as None

    @staticmethod
    def _name(dev: Path, hw: Path) -> str | None:
        product = _text(dev / "product_name")
        if product:
            return product
        ids = [(_text(dev / f) or "?").removeprefix("0x") for f in ("vendor", "device")]
        driver = _text(hw / "name")
        return f"{driver or 'PCI'} [{ids[0]}:{ids[1]}]"

    @staticmethod
    def _temps(hw: Path) -> dict:
        out = {}
        try:
            inputs = sorted(hw.glob("temp*_input"))
        except OSError:
            inputs = []
        for path in inputs:
            label = (_text(path.with_name(path.name.replace("_input", "_label"))) or "").lower()
            role = _TEMP_ROLES.get(label, "temp_c" if not label and path.name == "temp1_input" else None)
            if role and role not in out:
                out[role] = _number(path, 1e-3)
        return out

    @staticmethod
    def _freqs(hw: Path) -> dict:
        out = {}
        for path in sorted(hw.glob("freq*_input")):
            label = (_text(path.with_name(path.name.replace("_input", "_label"))) or "").lower()
            value = _number(path, 1e-6)
            if label and value is not None:
                out.setdefault(label, value)
        return out

    @staticmethod
    def _fan(hw: Path) -> float | None:
        duty, top = _number(hw / "pwm1"), _number(hw / "pwm1_max") or 255.0
        return None if duty is None else 100.0 * duty / top

    def _write(self, path: Path, value: int, index: int, what: str) -> None:
        where = f"{self.device}:{index} {what}"
        if not path.exists():
            raise ThermalUnsupportedError(f"{where}: not supported by this driver (no {path.name} in sysfs)")
        try:
            with open(path, "w") as f:
                f.write(f"{value}\n")
        except PermissionError:
            raise ThermalPermissionError(f"{where}: permission denied writing {path}; run as root (sudo)") from None
        except OSError as e:
            raise ThermalDriverError(f"{where}: writing {value} to {path} failed: {e.strerror}", e.errno) from None
