"""The command stream of one run: every dispatch and copy goes into one command encoder,
submitted once at the end -- or earlier only when the host must see a value first (the
condition of an ``if`` or ``while``).

A ``timed`` encoder also measures the device time of what it submits with GPU timestamps
(where the device has them, see ``Gpu.timestamp_period``): the first compute pass of each
submit writes its beginning, every pass its end, and the pair is resolved into a buffer of
its own before the submit. Wall time around a submit and its wait includes the driver's
submission and the host's wake-up: on the H200 with Vulkan these varied from 10% to
twice the time of a 4096^3 matmul batch, while the timestamps repeated to 0.1%."""
from __future__ import annotations

import numpy as np

__all__ = ["Encoder"]


class Encoder:
    def __init__(self, gpu, timed: bool = False):
        self.gpu = gpu
        self.submits = 0
        self.pending: set[int] = set()  # ids of executables encoded since the last submit
        self._encoder = None
        self._pass = None
        self._stamps = None  # the (beginning, end) query set of a timed encoder
        if timed and gpu.timestamp_period is not None:
            self._stamps = gpu.device.create_query_set(type=gpu.wgpu.QueryType.timestamp, count=2)
        self._stamped = False  # a pass of the current command encoder wrote the beginning
        self._resolved: list = []  # each timed submit's resolved (beginning, end)

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = self.gpu.device.create_command_encoder()
        return self._encoder

    def dispatch(self, pipeline, bind_group, grid) -> None:
        if self._pass is None:
            self._pass = self.encoder.begin_compute_pass(**self._timestamp_writes())
        self._pass.set_pipeline(pipeline)
        self._pass.set_bind_group(0, bind_group)
        self._pass.dispatch_workgroups(*grid)

    def copy(self, src, src_offset: int, dst, dst_offset: int, nbytes: int) -> None:
        if nbytes:
            self._end_pass()
            self.encoder.copy_buffer_to_buffer(src, src_offset, dst, dst_offset, nbytes)

    def flush(self) -> None:
        """Submit everything encoded so far."""
        self._end_pass()
        if self._encoder is not None:
            if self._stamped:
                u = self.gpu.wgpu.BufferUsage
                resolved = self.gpu.device.create_buffer(size=16, usage=u.QUERY_RESOLVE | u.COPY_SRC)
                self._encoder.resolve_query_set(self._stamps, 0, 2, resolved, 0)
                self._resolved.append(resolved)
                self._stamped = False
            self.gpu.device.queue.submit([self._encoder.finish()])
            self._encoder = None
            self.submits += 1
        self.pending.clear()

    def read(self, buffer, offset: int, nbytes: int) -> memoryview:
        """Bytes of ``buffer`` once all encoded work is done (submits it first)."""
        self.flush()
        return self.gpu.read(buffer, offset, nbytes)

    def wait(self) -> None:
        """Submit and block until the device has finished (for tracing)."""
        self.flush()
        self.gpu.sync()

    def device_seconds(self) -> float | None:
        """Seconds the device spent on the compute passes submitted so far, from the first
        pass's beginning to the last pass's end of each submit (waits for them); None for
        an encoder that is not timed or a device without timestamps."""
        if not self._resolved:
            return None
        ticks = 0
        for resolved in self._resolved:
            begin, end = np.frombuffer(self.gpu.read(resolved, 0, 16), np.uint64)
            ticks += int(end) - int(begin)
        return ticks * self.gpu.timestamp_period / 1e9

    def _timestamp_writes(self) -> dict:
        if self._stamps is None:
            return {}
        writes = {"query_set": self._stamps, "end_of_pass_write_index": 1}
        if not self._stamped:
            writes["beginning_of_pass_write_index"] = 0
            self._stamped = True
        return {"timestamp_writes": writes}

    def _end_pass(self) -> None:
        if self._pass is not None:
            self._pass.end()
            self._pass = None
