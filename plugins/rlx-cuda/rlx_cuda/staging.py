"""Moving a run's inputs and outputs between the host and the arena in few, cheap calls.

Why: ``run()`` used to upload each numpy input with its own synchronous pageable copy,
convert each device input through DLPack (which makes torch record and wait on an
event) and read each output with its own synchronous ``get``. On a small decode step
those calls cost twice the step itself. Here:

* host inputs are written into a pinned mirror of the arena's input block (the plan
  packs inputs back to back at its start) and sent with ONE async copy (one per 256 KiB
  when they are large, each issued as soon as its bytes are written);
* device inputs (CuPy arrays, torch CUDA tensors on CuPy's current stream) are copied
  device to device by pointer, without DLPack, all in one kernel launch; anything else
  goes through DLPack;
* numpy outputs come back with one async copy each into a pinned buffer and ONE
  synchronize; torch outputs are fresh tensors filled by a device copy.

The pinned buffers are reused: before the host writes the input mirror again it waits
on an event recorded after the previous upload (a no-op when the previous run synced).
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .graphs import control_kernels

__all__ = ["Staging", "torch_stream"]

_H2D, _D2H, _D2D = 1, 2, 3
_CHUNK = 256 << 10  # host input bytes per upload once inputs are large


class Staging:
    """The pinned host buffers and copy plan of one executable.

    ``inputs``: name -> device view of the input inside the arena's input block (offset
    ``view.data.ptr - block_ptr``); ``outputs``: the device arrays read after a run;
    ``write_device``: the slow path for a device array that is neither a CuPy array nor
    a torch CUDA tensor on the current stream.
    """

    def __init__(self, rt, block_ptr: int, block_bytes: int, inputs: Mapping[str, Any], outputs: Sequence[Any],
                 write_device: Callable[[Any, Any], None]):
        cp = rt.cp
        self.rt, self.cp = rt, cp
        self._write_device = write_device
        self._block_ptr, self._block_bytes = block_ptr, block_bytes
        self._in_mem = cp.cuda.alloc_pinned_memory(max(block_bytes, 1))
        mirror = np.frombuffer(self._in_mem, np.uint8, block_bytes)
        self._inputs = {name: (view, _host_view(mirror, view.data.ptr - block_ptr, view), view.data.ptr - block_ptr)
                        for name, view in inputs.items()}
        self._outputs = list(outputs)
        offsets, total = [], 0
        for arr in self._outputs:
            offsets.append(total)
            total += -(-max(arr.nbytes, 1) // 256) * 256
        self._out_mem = cp.cuda.alloc_pinned_memory(max(total, 1))
        out_host = np.frombuffer(self._out_mem, np.uint8, total)
        self._out_host = [_host_view(out_host, off, arr) for off, arr in zip(offsets, self._outputs)]
        self._uploaded = cp.cuda.Event(block=False, disable_timing=True)
        # The device-input copy table: written on the host (pinned), sent with one small
        # copy, read by the copy kernel from device memory (each of its thousands of
        # blocks reading the pinned table over the bus took about 40 us).
        rows = max(len(self._inputs), 1)
        self._table_mem = cp.cuda.alloc_pinned_memory(rows * 5 * 8)
        self._table = np.frombuffer(self._table_mem, np.uint64, rows * 5).reshape(rows, 5)
        self._table[:] = 0
        for row, (view, _, _) in enumerate(self._inputs.values()):
            self._table[row, 0], self._table[row, 2] = view.data.ptr, view.nbytes
        self._table_dev = cp.empty(rows * 5, cp.uint64)
        self._copy_launch = control_kernels(rt).copy_launch(self._table_dev.data.ptr, rows,
                                                            int(self._table[:, 2].max()))
        self._table_read = cp.cuda.Event(block=False, disable_timing=True)
        self._table_pending = False
        self.sent = cp.cuda.Event(block=False, disable_timing=True)
        self._upload_pending = False

    # --- inputs -------------------------------------------------------------------------
    def write_inputs(self, values: Mapping[str, Any]) -> None:
        """Stage every input of ``values`` into the arena on CuPy's current stream.

        Host inputs go to the pinned mirror; its bytes leave in copies of at least
        ``_CHUNK`` bytes issued as soon as they are written, so that for large inputs the
        upload of one overlaps the host copy of the next."""
        stream = self.cp.cuda.get_current_stream()
        memcpy = self.cp.cuda.runtime.memcpyAsync
        device: list[tuple[int, Any, Any]] = []
        if self._upload_pending:
            self._uploaded.synchronize()  # the mirror may still be on its way to the device
            self._upload_pending = False
        sent = end = 0  # mirror bytes [sent, end) are written but not yet sent
        for row, (name, (view, mirror, offset)) in enumerate(self._inputs.items()):
            value = values[name]
            if isinstance(value, np.ndarray):
                np.copyto(mirror, value.view(mirror.dtype).reshape(mirror.shape), casting="no")
                end = offset + mirror.nbytes
                if end - sent >= _CHUNK:
                    memcpy(self._block_ptr + sent, self._in_mem.ptr + sent, end - sent, _H2D, stream.ptr)
                    sent = end
            else:
                device.append((row, view, value))
        if end > sent:
            memcpy(self._block_ptr + sent, self._in_mem.ptr + sent, end - sent, _H2D, stream.ptr)
        if end:
            self._uploaded.record(stream)
            self._upload_pending = True
        if device:  # after the host inputs, on the same stream
            self._write_device_inputs(device, stream)

    def _write_device_inputs(self, device: list[tuple[int, Any, Any]], stream) -> None:
        """Device arrays copied device to device by pointer, all in ONE kernel launch
        (``graphs.rlx_cf_copy`` over a table sent with one small copy; a ``memcpyAsync``
        per input costs about 6 us of host time each): CuPy arrays, and
        torch CUDA tensors when torch's current stream is CuPy's (else DLPack orders the
        hand-over). Row i of the table is input i's copy, prefilled but for its source;
        a row without a source (a host input, or one written here the slow way) is skipped."""
        cp = self.cp
        torch = sys.modules.get("torch")
        same_stream = None
        sources = [0] * len(self._table)
        if self._table_pending:
            self._table_read.synchronize()  # the previous launch may still be reading the table
            self._table_pending = False
        for row, view, value in device:
            ptr = None
            if isinstance(value, cp.ndarray):
                if value.flags.c_contiguous and value.nbytes == view.nbytes and value.device.id == self.rt.index:
                    ptr = value.data.ptr
            elif torch is not None and isinstance(value, torch.Tensor) and value.is_cuda \
                    and value.get_device() == self.rt.index and value.is_contiguous() \
                    and value.numel() * value.element_size() == view.nbytes:
                if same_stream is None:
                    same_stream = torch_stream(torch, self.rt.index) == stream.ptr
                if same_stream:
                    ptr = value.data_ptr()
            if ptr is None:
                self._write_device(view, value)
            else:
                sources[row] = ptr
        if any(sources):
            self._table[:, 1] = sources
            self.cp.cuda.runtime.memcpyAsync(self._table_dev.data.ptr, self._table_mem.ptr, self._table.nbytes, _H2D,
                                             stream.ptr)
            self._copy_launch()
            self._table_read.record(stream)
            self._table_pending = True

    # --- outputs ------------------------------------------------------------------------
    def read_numpy(self, dtypes: Sequence[np.dtype], out: Sequence[np.ndarray] | None) -> list[np.ndarray]:
        """Every output to the host with one async copy each and one synchronize; fresh
        arrays (a later run never overwrites them), or ``out``'s arrays."""
        self.send_outputs()
        return self.take_outputs(dtypes, out)

    def send_outputs(self) -> None:
        """Enqueue every output's copy into this staging's pinned buffer, then record the
        event :meth:`take_outputs` waits for (``sent``: polled by a submitted run)."""
        stream = self.cp.cuda.get_current_stream()
        for src, host in zip(self._outputs, self._out_host):
            if src.nbytes:
                self.cp.cuda.runtime.memcpyAsync(host.ctypes.data, src.data.ptr, src.nbytes, _D2H, stream.ptr)
        self.sent.record(stream)

    def take_outputs(self, dtypes: Sequence[np.dtype], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """The outputs :meth:`send_outputs` sent, once they landed."""
        self.sent.synchronize()
        self._upload_pending = False
        if out is not None:
            for dst, host in zip(out, self._out_host):
                np.copyto(dst.view(host.dtype), host, casting="no")
            return list(out)
        return [host.copy().view(dt) for host, dt in zip(self._out_host, dtypes)]

    def read_torch(self, torch_dtypes: Sequence[Any]) -> list[Any]:
        """Every output as a fresh torch CUDA tensor (one device copy each, no sync)."""
        import torch
        stream = self.cp.cuda.get_current_stream()
        device = torch.device("cuda", self.rt.index)
        outs = []
        for src, dt in zip(self._outputs, torch_dtypes):
            t = torch.empty(src.shape, dtype=dt, device=device)
            self.rt.copy(t.data_ptr(), src.data.ptr, src.nbytes, stream)
            outs.append(t)
        return outs


def torch_stream(torch, index: int) -> int:
    """The handle of torch's current stream on device ``index``. Through torch's raw
    accessor where it has one (about 0.3 us; ``torch.cuda.current_stream`` builds a Stream
    object, about 8 us, and a run asks once or twice)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


def _host_view(buf: np.ndarray, offset: int, like) -> np.ndarray:
    """A numpy array over ``buf[offset:]`` of ``like``'s dims and dtype (0-d stays 0-d)."""
    dt = np.dtype(like.dtype)
    return buf[offset:offset + like.nbytes].view(dt).reshape(like.shape)
