"""Devices: the twelve built-in kinds, their stable labels and aliases, and parsing.

A ``Device`` is a label (``"cpu"``, ``"cuda"``, ``"gpu"`` ...) with an index for
machines with several of one kind (``"cuda:1"``). Plugins may serve a device that is
not built in: they declare it with :func:`register_device` and it then parses,
prints and selects like the others.

A plugin usually calls ``register_device`` when its entry-point module is imported, so
a label that is not known yet makes :func:`parse_device` (and ``Device(...)``) load the
registry's entry points once and look again before raising ``UnknownDeviceError``:
``Session("npu")``, ``RLX_DEVICES=npu`` and the conformance suite work in a process where
nothing else has touched the plugins. (While the entry points are being loaded -- inside
a plugin's import or hook -- an unknown label raises at once instead of recursing.)
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from ..errors import UnknownDeviceError

__all__ = ["Device", "parse_device", "device_label", "register_device", "known_devices", "lookup_label",
           "DEVICE_PRIORITY"]

# label -> one-line description. Order is the fallback priority (fastest class first).
_BUILTIN = {
    "cuda": "NVIDIA GPU (CUDA)",
    "rocm": "AMD GPU (ROCm / OpenCL)",
    "tpu": "TPU, or XLA on another PJRT platform",
    "metal": "Apple GPU (Metal)",
    "mlx": "Apple MLX",
    "ane": "Apple Neural Engine",
    "gpu": "any GPU through wgpu (best adapter)",
    "vulkan": "wgpu forced onto Vulkan",
    "directx": "wgpu forced onto DirectX 12",
    "opengl": "wgpu forced onto OpenGL",
    "webgpu": "portable WebGPU profile (spec-default limits)",
    "cpu": "host CPU",
}
_ALIASES = {
    "nvidia": "cuda", "cu": "cuda", "amd": "rocm", "hip": "rocm", "opencl": "rocm", "cl": "rocm",
    "xla": "tpu", "jax": "tpu", "apple": "metal", "mps": "metal", "wgpu": "gpu",
    "vk": "vulkan", "gl": "opengl", "dx12": "directx", "d3d12": "directx", "host": "cpu",
}
_EXTRA: dict[str, str] = {}

DEVICE_PRIORITY = tuple(_BUILTIN)


@dataclass(frozen=True, order=True)
class Device:
    """A device kind plus index: ``Device("cuda", 1)``; ``Device.CUDA`` is index 0.

    A Device equals its label string, ``str(device)``: ``Device.CPU == "cpu"`` and
    ``Device("cuda", 1) == "cuda:1"``, and it hashes like that string, so either form
    finds it in a set or dict. Aliases parse (``parse_device("nvidia")``) but do not
    compare equal (``Device.CUDA != "nvidia"``): equality with a string must agree
    with the string's hash.
    """

    label: str
    index: int = 0

    def __post_init__(self):
        if self.label not in _BUILTIN and self.label not in _EXTRA:
            if not (_load_plugins() and self.label in _EXTRA):
                raise UnknownDeviceError(_unknown_message(self.label))

    @property
    def description(self) -> str:
        return _BUILTIN.get(self.label) or _EXTRA[self.label]

    @property
    def is_builtin(self) -> bool:
        return self.label in _BUILTIN

    def is_available(self) -> bool:
        """True when an installed plugin serves this device and its probe passes."""
        from .registry import registry
        return registry().is_available(self)

    def __str__(self) -> str:
        return self.label if self.index == 0 else f"{self.label}:{self.index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, Device):
            return (self.label, self.index) == (other.label, other.index)
        if isinstance(other, str):
            return str(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return f"Device({str(self)!r})"


for _label in _BUILTIN:  # Device.CPU, Device.CUDA, ...
    setattr(Device, _label.upper(), Device(_label))


def register_device(label: str, description: str, aliases: tuple[str, ...] = ()) -> Device:
    """Declare a device kind that is not built in (called by the plugin serving it)."""
    label = label.strip().lower()
    if label in _BUILTIN:
        return Device(label)
    _EXTRA[label] = description
    for a in aliases:
        _ALIASES.setdefault(a.lower(), label)
    return Device(label)


def known_devices() -> list[str]:
    return list(_BUILTIN) + list(_EXTRA)


def parse_device(spec: "str | Device") -> Device:
    """``"CUDA"``, ``"nvidia"``, ``"cuda:1"``, ``"wgpu"`` -> Device; unknown names raise
    :class:`UnknownDeviceError` listing the valid ones (with a close match if any)."""
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise UnknownDeviceError(f"expected a device name, got {type(spec).__name__} {spec!r}")
    text = spec.strip().lower()
    name, _, idx = text.partition(":")
    label = lookup_label(name)
    if label is None and _load_plugins():  # a plugin not loaded yet may declare it
        label = lookup_label(name)
    if label is None:
        raise UnknownDeviceError(_unknown_message(spec))
    name = label
    if idx and not idx.isdigit():
        raise UnknownDeviceError(f"device index in {spec!r} must be a non-negative integer")
    return Device(name, int(idx or 0))


def lookup_label(name: str) -> str | None:
    """The label ``name`` (a label or alias, any case, no index) stands for among the
    devices known now, or None. Loads nothing."""
    name = name.strip().lower()
    name = _ALIASES.get(name, name)
    return name if name in _BUILTIN or name in _EXTRA else None


def _load_plugins() -> bool:
    """Load the registry's entry points (a no-op once loaded) so that the devices plugins
    declare at import exist. False, loading nothing, inside the loading itself."""
    from .registry import ensure_loaded
    return ensure_loaded()


def device_label(device: "str | Device") -> str:
    """The stable label of a device (``"gpu"`` for wgpu, ``"cuda:1"`` with an index)."""
    return str(parse_device(device))


def _unknown_message(spec) -> str:
    names = known_devices()
    close = difflib.get_close_matches(str(spec).lower(), names + list(_ALIASES), n=1)
    hint = f"; did you mean '{_ALIASES.get(close[0], close[0])}'?" if close else ""
    from .registry import unloaded_plugins_note
    return f"unknown device {spec!r}{hint} Known devices: {', '.join(names)} (aliases: " \
           f"{', '.join(f'{a}->{t}' for a, t in sorted(_ALIASES.items()))}){unloaded_plugins_note()}"
