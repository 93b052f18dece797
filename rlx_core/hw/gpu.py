"""GPU telemetry and control: one :class:`GpuTelemetryProvider` per device label.

Built in (each importing its library on first read only, so ``rlx_core.hw`` stays cheap):
``cuda`` through NVML (``nvidia-ml-py``, :mod:`rlx_core.hw.nvml`), ``rocm`` through AMD
SMI (ROCm's ``amdsmi``, :mod:`rlx_core.hw.amdsmi`), both falling back to sysfs/hwmon
when their library or driver is absent, and ``gpu`` (Intel and other DRM GPUs) through
sysfs/hwmon alone (:mod:`rlx_core.hw.sysfs`). A plugin may register a provider of its
own for a label, which then replaces the built-in one::

    from rlx_core.hw import GpuTelemetryProvider, register_telemetry_provider
    register_telemetry_provider(MyProvider())   # must not import its library until first read

Readings are :class:`GpuThermal` records in which ``None`` means "the sensor did not
report", never a fake 0. Control knobs (power cap, locked clocks, fan) validate their
arguments here, then call the provider; everything that goes wrong raises a
:class:`~rlx_core.errors.ThermalError` subclass saying why (no driver, knob not
supported, needs root, value out of range, driver error code).
"""
from __future__ import annotations

import abc
import logging
import math
import threading
from dataclasses import asdict, dataclass

from ..errors import ThermalError
from ..runtime.device import parse_device

__all__ = ["GpuThermal", "GpuTelemetryProvider", "register_telemetry_provider", "unregister_telemetry_provider",
           "telemetry_providers", "device_thermal_count", "device_thermal", "all_gpu_thermal",
           "power_cap_range", "set_power_cap", "set_locked_clocks", "reset_locked_clocks", "set_fan_percent",
           "reset_fan", "ThermalUnavailableError", "ThermalUnsupportedError", "ThermalPermissionError",
           "ThermalRangeError", "ThermalDriverError"]

log = logging.getLogger("rlx.hw")
# A power cap within this many watts of the allowed range is accepted (drivers round).
POWER_CAP_TOLERANCE_W = 0.5


class ThermalUnavailableError(ThermalError):
    """No telemetry here: no provider for the device, no driver, or no such GPU index."""


class ThermalUnsupportedError(ThermalError):
    """The device or its driver has no such control knob."""


class ThermalPermissionError(ThermalError):
    """The driver refused: changing GPU limits needs root (run as root / with sudo)."""


class ThermalRangeError(ThermalError, ValueError):
    """A requested value lies outside what the driver allows."""

    def __init__(self, what: str, requested: float, low: float, high: float, open_low: bool = False):
        self.requested, self.low, self.high = requested, low, high
        super().__init__(f"{what} {requested:g} is outside the allowed range "
                         f"{'(' if open_low else '['}{low:g}, {high:g}]")


class ThermalDriverError(ThermalError):
    """The driver returned an error code the provider could not map to another kind."""

    def __init__(self, message: str, code: int | None = None):
        self.code = code
        super().__init__(message if code is None else f"{message} (driver error code {code})")


@dataclass(frozen=True)
class GpuThermal:
    """One GPU's readings. Units: degrees C, watts, percent, MHz; ``None`` = not reported."""

    device: str
    index: int
    name: str | None = None
    temp_c: float | None = None
    hotspot_c: float | None = None
    mem_temp_c: float | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    fan_percent: float | None = None
    clock_mhz: float | None = None
    util_percent: float | None = None
    mem_clock_mhz: float | None = None
    mem_util_percent: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None

    def power_headroom(self) -> float | None:
        """Fraction of the power cap still unused, in [0, 1]; None unless both are reported."""
        if self.power_w is None or not self.power_cap_w:
            return None
        return min(1.0, max(0.0, 1.0 - self.power_w / self.power_cap_w))

    def as_dict(self) -> dict:
        return asdict(self)


class GpuTelemetryProvider(abc.ABC):
    """Reads (and optionally controls) the GPUs of one device label.

    Subclasses set ``device`` and implement ``count`` and ``read``; control methods they
    do not override raise :class:`ThermalUnsupportedError`. Implementations raise
    ThermalError subclasses (mapping their driver's codes), never bare driver errors.
    """

    device: str = ""

    @abc.abstractmethod
    def count(self) -> int:
        """How many GPUs of this kind the driver sees (0 when none or no driver)."""

    @abc.abstractmethod
    def read(self, index: int) -> GpuThermal:
        """The current readings of GPU ``index``."""

    def absence_reason(self) -> str | None:
        """Why ``count()`` is 0 (no library, no driver, no such GPU), where known."""
        return None

    def power_cap_range(self, index: int) -> tuple[float, float] | None:
        """``(min_w, max_w)`` the driver accepts, or None if it does not say."""
        return None

    def clock_range(self, index: int) -> tuple[float, float] | None:
        """``(min_mhz, max_mhz)`` of the graphics clocks the GPU supports, or None."""
        return None

    def set_power_cap(self, index: int, watts: float) -> None:
        raise ThermalUnsupportedError(f"{self.device}: setting the power cap is not supported")

    def set_locked_clocks(self, index: int, min_mhz: float, max_mhz: float) -> None:
        raise ThermalUnsupportedError(f"{self.device}: locking clocks is not supported")

    def reset_locked_clocks(self, index: int) -> None:
        raise ThermalUnsupportedError(f"{self.device}: resetting locked clocks is not supported")

    def set_fan_percent(self, index: int, percent: float) -> None:
        raise ThermalUnsupportedError(f"{self.device}: setting the fan speed is not supported")

    def reset_fan(self, index: int) -> None:
        raise ThermalUnsupportedError(f"{self.device}: resetting the fan is not supported")


_PROVIDERS: dict[str, GpuTelemetryProvider] = {}
_BUILTIN: dict[str, GpuTelemetryProvider] = {}
_LOCK = threading.Lock()


def _builtin_providers() -> dict[str, GpuTelemetryProvider]:
    """The core's own providers, made once (none of them loads a library here)."""
    with _LOCK:
        if not _BUILTIN:
            from .amdsmi import AmdSmiProvider
            from .nvml import NvmlProvider
            from .sysfs import SysfsProvider
            _BUILTIN.update(cuda=NvmlProvider(), rocm=AmdSmiProvider(), gpu=SysfsProvider("gpu"))
        return dict(_BUILTIN)


def register_telemetry_provider(provider: GpuTelemetryProvider) -> None:
    """Install ``provider`` for its device label (replacing an earlier one)."""
    if not isinstance(provider, GpuTelemetryProvider):
        raise ThermalError(f"expected a GpuTelemetryProvider, got {type(provider).__name__}")
    label = parse_device(provider.device).label
    with _LOCK:
        _PROVIDERS[label] = provider


def unregister_telemetry_provider(device: str) -> None:
    """Remove a registered provider (the built-in one for that label, if any, serves again)."""
    with _LOCK:
        _PROVIDERS.pop(parse_device(device).label, None)


def telemetry_providers() -> dict[str, GpuTelemetryProvider]:
    """Device label -> provider: the built-in ones, replaced by any a plugin registered
    (after making sure installed plugins have loaded)."""
    from ..runtime.registry import registry
    registry()  # plugins register their providers when their entry points load
    builtin = _builtin_providers()
    with _LOCK:
        return builtin | _PROVIDERS


def device_thermal_count(device: str) -> int:
    """GPUs of ``device`` with telemetry (0 when no provider serves it)."""
    provider = telemetry_providers().get(parse_device(device).label)
    return _safe_count(provider) if provider else 0


def device_thermal(device: str, index: int = 0) -> GpuThermal:
    """Readings of one GPU; raises ThermalUnavailableError when there is none to read."""
    provider = _provider(device, "telemetry")
    _check_index(provider, index)
    return provider.read(index)


def all_gpu_thermal() -> list[GpuThermal]:
    """Readings of every GPU of every provider; a provider that fails is logged and skipped."""
    out = []
    for label, provider in sorted(telemetry_providers().items()):
        for index in range(_safe_count(provider)):
            try:
                out.append(provider.read(index))
            except ThermalError as e:
                log.warning("GPU telemetry %s:%d unreadable: %s", label, index, e)
    return out


def power_cap_range(device: str, index: int = 0) -> tuple[float, float] | None:
    provider = _provider(device, "power cap")
    _check_index(provider, index)
    return provider.power_cap_range(index)


def set_power_cap(device: str, index: int, watts: float) -> None:
    """Set the power limit (needs root). Values outside the driver's range raise ThermalRangeError."""
    _check_number("power cap (W)", watts, low=0.0, open_low=True)
    provider = _provider(device, "power cap")
    _check_index(provider, index)
    allowed = provider.power_cap_range(index)
    if allowed is not None:
        low, high = allowed
        if not (low - POWER_CAP_TOLERANCE_W <= watts <= high + POWER_CAP_TOLERANCE_W):
            raise ThermalRangeError(f"{device}:{index} power cap (W)", watts, low, high)
    provider.set_power_cap(index, watts)


def set_locked_clocks(device: str, index: int, min_mhz: float, max_mhz: float) -> None:
    """Lock the graphics clock to ``[min_mhz, max_mhz]`` (needs root). Clocks outside
    what the GPU supports raise ThermalRangeError before the driver is asked."""
    _check_number("min clock (MHz)", min_mhz, low=0.0, open_low=True)
    _check_number("max clock (MHz)", max_mhz, low=min_mhz)
    provider = _provider(device, "clock control")
    _check_index(provider, index)
    allowed = provider.clock_range(index)
    if allowed is not None:
        for what, mhz in (("min clock (MHz)", min_mhz), ("max clock (MHz)", max_mhz)):
            if not allowed[0] <= mhz <= allowed[1]:
                raise ThermalRangeError(f"{device}:{index} {what}", mhz, *allowed)
    provider.set_locked_clocks(index, min_mhz, max_mhz)


def reset_locked_clocks(device: str, index: int = 0) -> None:
    provider = _provider(device, "clock control")
    _check_index(provider, index)
    provider.reset_locked_clocks(index)


def set_fan_percent(device: str, index: int, percent: float) -> None:
    """Put the fan under manual control at ``percent`` (0-100; needs root)."""
    _check_number("fan speed (%)", percent, low=0.0, high=100.0)
    provider = _provider(device, "fan control")
    _check_index(provider, index)
    provider.set_fan_percent(index, percent)


def reset_fan(device: str, index: int = 0) -> None:
    provider = _provider(device, "fan control")
    _check_index(provider, index)
    provider.reset_fan(index)


# --- helpers ----------------------------------------------------------------------------
def _provider(device: str, what: str) -> GpuTelemetryProvider:
    label = parse_device(device).label
    provider = telemetry_providers().get(label)
    if provider is None:
        known = ", ".join(sorted(telemetry_providers())) or "none (no GPU plugin installed)"
        raise ThermalUnsupportedError(f"no GPU {what} for device '{label}'; devices with telemetry: {known}")
    return provider


def _check_index(provider: GpuTelemetryProvider, index: int) -> None:
    n = _safe_count(provider)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise ThermalUnavailableError(f"{provider.device}: no GPU index {index!r}; the driver reports {n} GPU(s)")


def _safe_count(provider: GpuTelemetryProvider) -> int:
    try:
        return int(provider.count())
    except ThermalError as e:
        log.info("GPU telemetry for %s unavailable: %s", provider.device, e)
        return 0


def _check_number(what: str, value, low: float | None = None, high: float | None = None,
                  open_low: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ThermalError(f"{what} must be a finite number, got {value!r}")
    too_low = low is not None and (value <= low if open_low else value < low)
    too_high = high is not None and value > high
    if too_low or too_high:
        raise ThermalRangeError(what, value, -math.inf if low is None else low,
                                math.inf if high is None else high, open_low)
