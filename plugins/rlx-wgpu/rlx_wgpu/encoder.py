"""The command stream of one run: every dispatch and copy goes into one command encoder,
submitted once at the end -- or earlier only when the host must see a value first (the
condition of an ``if`` or ``while``)."""
from __future__ import annotations

__all__ = ["Encoder"]


class Encoder:
    def __init__(self, gpu):
        self.gpu = gpu
        self.submits = 0
        self.pending: set[int] = set()  # ids of executables encoded since the last submit
        self._encoder = None
        self._pass = None

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = self.gpu.device.create_command_encoder()
        return self._encoder

    def dispatch(self, pipeline, bind_group, grid) -> None:
        if self._pass is None:
            self._pass = self.encoder.begin_compute_pass()
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

    def _end_pass(self) -> None:
        if self._pass is not None:
            self._pass.end()
            self._pass = None
