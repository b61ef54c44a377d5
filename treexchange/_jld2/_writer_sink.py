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
        """Write out buffered metadata.

        Pieces are sorted by offset and merged into runs of touching or overlapping pieces; each
        run is assembled in memory, applying its pieces in the order they were put (so a later
        write wins where two overlap), and written with one call.
        """
        order = sorted(range(len(self._pending)), key=lambda i: self._pending[i][0])
        run: list[int] = []
        run_start = run_end = -1
        for i in order:
            offset, data = self._pending[i]
            if run and offset <= run_end:
                run.append(i)
                run_end = max(run_end, offset + len(data))
                continue
            if run:
                self._write_run(run, run_start, run_end)
            run, run_start, run_end = [i], offset, offset + len(data)
        if run:
            self._write_run(run, run_start, run_end)
        self.bytes_written += self._pending_bytes
        self._pending.clear()
        self._pending_bytes = 0

    def _write_run(self, run: list[int], start: int, end: int) -> None:
        if len(run) == 1:
            data = self._pending[run[0]][1]
        else:
            buf = bytearray(end - start)
            for i in sorted(run):  # insertion order: later writes win
                offset, piece = self._pending[i]
                buf[offset - start : offset - start + len(piece)] = piece
            data = bytes(buf)
        self._file.seek(start)
        self._file.write(data)

    def finish(self, size: int) -> None:
        """Flush and cut the file to exactly ``size`` bytes."""
        self.flush()
        self._file.truncate(size)
        self._file.flush()
