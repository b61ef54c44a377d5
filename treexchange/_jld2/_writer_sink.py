"""Random-access output for the writer.

JLD2 allocates space front to back (``end_of_data``) but fills some of it later: an object header
is reserved before the objects it references are written behind it. The writer therefore writes
at explicit offsets. Small metadata writes are buffered and flushed in the order they were made
(later writes may overwrite earlier ones, e.g. a global heap's size field); array payloads go
straight to the file. Holes left between writes read back as zeros, exactly like the zero-filled
memory map JLD2.jl writes through.
"""

from __future__ import annotations

from typing import BinaryIO

_FLUSH_BYTES = 4 << 20


class Sink:
    """Writes bytes at absolute offsets of an open binary file."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._pending: list[tuple[int, bytes]] = []
        self._pending_bytes = 0
        self.bytes_written = 0

    def put(self, offset: int, data: bytes) -> None:
        """Write a (small) piece of metadata at ``offset`` (buffered)."""
        self._pending.append((offset, data))
        self._pending_bytes += len(data)
        if self._pending_bytes >= _FLUSH_BYTES:
            self.flush()

    def put_large(self, offset: int, data: bytes | memoryview) -> None:
        """Write a payload at ``offset`` directly (no copy beyond the OS's)."""
        self._file.seek(offset)
        self._file.write(data)
        self.bytes_written += len(data)

    def flush(self) -> None:
        """Write out buffered metadata, in order."""
        f = self._file
        # Coalesce runs of adjacent writes into one syscall.
        run_start = -1
        run: list[bytes] = []
        run_end = -1
        for offset, data in self._pending:
            if offset == run_end:
                run.append(data)
                run_end += len(data)
                continue
            if run:
                f.seek(run_start)
                f.write(b"".join(run))
            run_start, run, run_end = offset, [data], offset + len(data)
        if run:
            f.seek(run_start)
            f.write(b"".join(run))
        self.bytes_written += self._pending_bytes
        self._pending.clear()
        self._pending_bytes = 0

    def finish(self, size: int) -> None:
        """Flush and cut the file to exactly ``size`` bytes."""
        self.flush()
        self._file.truncate(size)
        self._file.flush()
