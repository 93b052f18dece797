"""DevicePolicy: which devices a process may use, and how it picks among them.

A policy is an allow-list (``None`` = every device), a deny-list, a prefer order and a
pick strategy (cost model, or a one-time benchmark of N runs). Policies are immutable;
each ``with_*`` returns a new one. They act on device *kinds*: ``"cuda:1"`` in a list
stands for ``cuda``.

Environment (``PREFIX`` is ``RLX`` for :meth:`DevicePolicy.from_env`, or the prefix given to
:meth:`DevicePolicy.from_env_key`, so ``from_env_key("MYAPP")`` reads ``MYAPP_DEVICES``):

============================  =============================================================
``PREFIX_DEVICES``            allow-list, e.g. ``cpu,cuda`` (``,`` ``;`` or spaces; aliases ok)
``PREFIX_DENY_DEVICES``       deny-list
``PREFIX_PREFER_DEVICES``     tie-break order when the cost model rates devices within 5%
``PREFIX_BENCHMARK_PICK``     ``N`` >= 1: pick by benchmarking N runs per device; ``0``: cost model
``PREFIX_DEVICE``             default device for resolved runs (see ``resolve_device``)
``PREFIX_DEVICE_CHAIN``       fallback order for ``run_chain``
============================  =============================================================

Decisions where the original was inconsistent:

* ``from_env_key("MYAPP")`` reads ``MYAPP_*`` as documented (the original silently read
  ``RLX_MYAPP_*``).
* A value that does not parse raises :class:`PolicyError` naming the variable; the
  original ignored it silently. An empty or blank value counts as unset.
* ``RLX_FORCE_DEVICE`` (the original's way to bypass every check) is rejected with a
  PolicyError pointing at ``RLX_DEVICE``: nothing bypasses availability here.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from typing import Iterable

from ..errors import PolicyError, UnknownDeviceError
from ..runtime.device import DEVICE_PRIORITY, Device, parse_device

__all__ = ["DevicePolicy", "parse_device_list", "device_from_env", "device_chain_from_env", "COST_MODEL",
           "BENCHMARK"]

COST_MODEL, BENCHMARK = "cost_model", "benchmark"
_PREFIX_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_device_list(spec: "str | Device | Iterable[str | Device]", what: str = "device list") -> tuple[Device, ...]:
    """``"cuda, gpu;cpu"`` or ``["cuda", Device.CPU]`` -> devices, de-duplicated in order.

    Unknown names raise :class:`PolicyError` naming ``what`` (e.g. the variable) and the
    bad entry.
    """
    items = re.split(r"[,;\s]+", spec) if isinstance(spec, str) else [spec] if isinstance(spec, Device) else spec
    out: list[Device] = []
    try:
        for item in items:
            if isinstance(item, str) and not item.strip():
                continue
            dev = Device(parse_device(item).label)
            if dev not in out:
                out.append(dev)
    except UnknownDeviceError as e:
        raise PolicyError(f"{what}: {e}") from None
    except TypeError:
        raise PolicyError(f"{what}: expected device names, got {type(spec).__name__} {spec!r}") from None
    return tuple(out)


def _env_name(prefix: str, suffix: str) -> str:
    return f"{_check_prefix(prefix)}_{suffix}"


def _check_prefix(prefix: str) -> str:
    text = prefix.rstrip("_") if isinstance(prefix, str) else ""
    if not _PREFIX_RE.fullmatch(text):
        raise PolicyError(f"environment prefix must look like 'MYAPP' (letters, digits, _), got {prefix!r}")
    return text


def _env_value(name: str) -> str | None:
    raw = os.environ.get(name)
    return raw if raw is not None and raw.strip() else None


def _env_list(name: str) -> tuple[Device, ...] | None:
    raw = _env_value(name)
    if raw is None:
        return None
    devices = parse_device_list(raw, f"{name}={raw!r}")
    if not devices:
        raise PolicyError(f"{name}={raw!r} names no device; give e.g. {name}=cpu,cuda or unset it")
    return devices


def device_from_env(prefix: str = "RLX") -> Device | None:
    """``PREFIX_DEVICE`` as a Device (None when unset); a bad name raises PolicyError."""
    name = _env_name(prefix, "DEVICE")
    raw = _env_value(name)
    if raw is None:
        return None
    devices = parse_device_list(raw, f"{name}={raw!r}")
    if len(devices) != 1:
        raise PolicyError(f"{name}={raw!r} must name exactly one device (use {prefix}_DEVICE_CHAIN for a list)")
    return devices[0]


def device_chain_from_env(prefix: str = "RLX") -> tuple[Device, ...]:
    """``PREFIX_DEVICE_CHAIN`` (empty tuple when unset); a bad name raises PolicyError."""
    return _env_list(_env_name(prefix, "DEVICE_CHAIN")) or ()


@dataclass(frozen=True)
class DevicePolicy:
    """Allowed devices and how to pick one. Build with the class methods, not the fields.

    ``benchmark_runs`` 0 picks by cost model; N >= 1 by a one-time benchmark of N runs
    (needs inputs at resolve time; falls back to the cost model without them).
    ``env_prefix`` is where ``PREFIX_DEVICE`` / ``PREFIX_DEVICE_CHAIN`` are read from.
    """

    allow: tuple[Device, ...] | None = None
    deny: tuple[Device, ...] = ()
    prefer: tuple[Device, ...] = ()
    benchmark_runs: int = 0
    env_prefix: str = "RLX"

    # --- construction -------------------------------------------------------------------
    @classmethod
    def all(cls) -> "DevicePolicy":
        """Every installed, available device; pick by cost model."""
        return cls()

    @classmethod
    def only(cls, devices) -> "DevicePolicy":
        """Allow just ``devices`` (names, aliases or Device objects)."""
        allow = parse_device_list(devices, "DevicePolicy.only")
        if not allow:
            raise PolicyError("DevicePolicy.only needs at least one device")
        return cls(allow=allow)

    def with_deny(self, devices) -> "DevicePolicy":
        return replace(self, deny=_merge(self.deny, parse_device_list(devices, "DevicePolicy.with_deny")))

    def with_prefer(self, devices) -> "DevicePolicy":
        """Tie-break order: among devices the cost model rates within 5%, earlier here wins."""
        return replace(self, prefer=_merge(self.prefer, parse_device_list(devices, "DevicePolicy.with_prefer")))

    def with_benchmark_pick(self, runs: int) -> "DevicePolicy":
        """Pick by timing ``runs`` runs on every viable device, once per runner."""
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            raise PolicyError(f"with_benchmark_pick needs a run count >= 1, got {runs!r}")
        return replace(self, benchmark_runs=runs)

    def with_cost_model_pick(self) -> "DevicePolicy":
        return replace(self, benchmark_runs=0)

    @classmethod
    def from_env(cls) -> "DevicePolicy":
        """The policy the ``RLX_*`` variables describe (see the module docstring)."""
        return cls.from_env_key("RLX")

    @classmethod
    def from_env_key(cls, prefix: str) -> "DevicePolicy":
        """Like :meth:`from_env` but reading ``PREFIX_DEVICES``, ``PREFIX_DENY_DEVICES``, ..."""
        prefix = _check_prefix(prefix)
        forced = f"{prefix}_FORCE_DEVICE"
        if _env_value(forced) is not None:
            raise PolicyError(f"{forced} is not supported: it bypassed availability checks. Use "
                              f"{prefix}_DEVICE={os.environ[forced].strip()} (checked against this graph and "
                              f"host) or {prefix}_DEVICES to restrict the choice")
        bench_name = f"{prefix}_BENCHMARK_PICK"
        return cls(allow=_env_list(f"{prefix}_DEVICES"), deny=_env_list(f"{prefix}_DENY_DEVICES") or (),
                   prefer=_env_list(f"{prefix}_PREFER_DEVICES") or (),
                   benchmark_runs=_env_runs(bench_name), env_prefix=prefix)

    # --- queries --------------------------------------------------------------------------
    @property
    def pick(self) -> str:
        """``"cost_model"`` or ``"benchmark"``."""
        return BENCHMARK if self.benchmark_runs else COST_MODEL

    def allows(self, device: "Device | str") -> bool:
        return self.blocker(device) is None

    def blocker(self, device: "Device | str") -> tuple[str, str] | None:
        """``(reason, how to change it)`` when the policy excludes ``device``, else None."""
        dev = Device(parse_device(device).label)
        if dev in self.deny:
            return ("denied by DevicePolicy",
                    f"remove '{dev}' from {self.env_prefix}_DENY_DEVICES (or the policy's with_deny)")
        if self.allow is not None and dev not in self.allow:
            allowed = ",".join(d.label for d in self.allow)
            return ("not in the DevicePolicy allow-list",
                    f"add it: {self.env_prefix}_DEVICES={allowed},{dev} (or DevicePolicy.only)")
        return None

    def order(self, devices: Iterable["Device | str"]) -> list[Device]:
        """``devices`` the policy allows, in prefer order, then platform priority."""
        allowed = [d for d in map(parse_device, devices) if self.allows(d)]
        return sorted(allowed, key=self.rank_key)

    def rank_key(self, device: Device) -> tuple[int, int]:
        """Sort key: position in ``prefer`` (absent: after all), then in DEVICE_PRIORITY."""
        kind = Device(device.label)
        return (self.prefer.index(kind) if kind in self.prefer else len(self.prefer),
                DEVICE_PRIORITY.index(kind.label) if kind.label in DEVICE_PRIORITY else len(DEVICE_PRIORITY))

    def device_hint(self) -> Device | None:
        """``PREFIX_DEVICE`` of this policy's prefix."""
        return device_from_env(self.env_prefix)

    def device_chain(self) -> tuple[Device, ...]:
        """``PREFIX_DEVICE_CHAIN`` of this policy's prefix."""
        return device_chain_from_env(self.env_prefix)

    def describe(self) -> str:
        parts = [f"allow={','.join(map(str, self.allow)) if self.allow is not None else 'all'}"]
        if self.deny:
            parts.append(f"deny={','.join(map(str, self.deny))}")
        if self.prefer:
            parts.append(f"prefer={','.join(map(str, self.prefer))}")
        parts.append(f"pick={self.pick}" + (f"({self.benchmark_runs} runs)" if self.benchmark_runs else ""))
        return " ".join(parts)


def _merge(old: tuple[Device, ...], new: tuple[Device, ...]) -> tuple[Device, ...]:
    return old + tuple(d for d in new if d not in old)


def _env_runs(name: str) -> int:
    raw = _env_value(name)
    if raw is None:
        return 0
    text = raw.strip()
    if not text.isdigit():
        raise PolicyError(f"{name}={raw!r}: expected a run count (an integer >= 1, or 0 for the cost model)")
    return int(text)
