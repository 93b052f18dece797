"""A sysfs tree laid out as Linux lays out DRM cards and their hwmon sensors, for tests of
``rlx_core.hw.sysfs`` (and of ``rlx gpu`` through it) on machines without a GPU.

``make_card`` writes ``class/drm/cardN`` as a symlink into ``devices/pci.../drm/cardN``
with ``device`` linking the PCI device directory, which holds ``vendor``, ``device``,
the driver's extra files and ``hwmon/hwmonN/`` -- the same links and files the kernel
exports (values in the kernel's units: millidegrees, microwatts, hertz, bytes).
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["make_card", "AMDGPU_HWMON", "AMDGPU_DEVICE"]

# An amdgpu card as the driver exports it (MI210-like values); edit copies in tests.
AMDGPU_HWMON = {"name": "amdgpu", "temp1_input": "41000", "temp1_label": "edge", "temp2_input": "55000",
                "temp2_label": "junction", "temp3_input": "48000", "temp3_label": "mem",
                "power1_average": "312000000", "power1_cap": "300000000", "power1_cap_min": "0",
                "power1_cap_max": "300000000", "pwm1": "102", "pwm1_max": "255", "pwm1_enable": "2",
                "freq1_input": "1700000000", "freq1_label": "sclk", "freq2_input": "1600000000",
                "freq2_label": "mclk"}
AMDGPU_DEVICE = {"gpu_busy_percent": "87", "mem_busy_percent": "12", "mem_info_vram_used": str(3 * 2**30),
                 "mem_info_vram_total": str(64 * 2**30)}


def make_card(root: "str | Path", card: int, vendor: str, device: str = "0x740f", hwmon: dict | None = None,
              files: dict | None = None, card_files: dict | None = None) -> Path:
    """Write card ``card`` of PCI ``vendor``:``device`` under ``root``; ``hwmon`` fills
    ``hwmon0`` (None: no hwmon directory), ``files`` the PCI device directory and
    ``card_files`` the card's own directory. Returns the PCI device directory."""
    root = Path(root)
    pci = root / "devices" / "pci0000:00" / f"0000:0{card}:00.0"
    card_dir = pci / "drm" / f"card{card}"
    card_dir.mkdir(parents=True)
    (pci / "vendor").write_text(vendor + "\n")
    (pci / "device").write_text(device + "\n")
    os.symlink(os.path.relpath(pci, card_dir), card_dir / "device")
    for name, value in (files or {}).items():
        (pci / name).write_text(value + "\n")
    for name, value in (card_files or {}).items():
        (card_dir / name).write_text(value + "\n")
    if hwmon is not None:
        mon = pci / "hwmon" / "hwmon0"
        mon.mkdir(parents=True)
        for name, value in hwmon.items():
            (mon / name).write_text(value + "\n")
    drm = root / "class" / "drm"
    drm.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(card_dir, drm), drm / f"card{card}")
    os.symlink(os.path.relpath(card_dir, drm), drm / f"card{card}-DP-1")  # a connector: not a card
    return pci
