"""Random-access output for the writer.

JLD2 allocates space front to back (``end_of_data``) but fills some of it later: an object header
is reserved before the objects it references are written behind it. The writer therefore writes
at explicit offsets. Small metadata (headers, heap objects, small arrays' bytes) lands in a
*window*: a zeroed buffer standing for the file from the window's start, where each piece is
copied to its offset (a later write over an earlier one wins, e.g. a global heap's size field).
Once 4 MiB of it is used, the window is written out in one call -- the checksums of the object
headers in it computed first, together, from the buffer itself -- and a new one starts where it
ended. A header filled in after the window moved past its place (it was reserved before what it
points to) is a *late* piece, written after the window, in the order put. Array payloads go
straight to the file and are holes the window never writes over. Anything never written reads
back as zeros, exactly like the zero-filled memory map JLD2.jl writes through.

Array payloads of a real file (one with a descriptor) are written by a background thread with
``os.pwrite`` while the calling thread prepares the next block (the column-major transpose of
C-ordered input, see :func:`treexchange._jld2._writer_arrays.column_major_pieces`): numpy's
copies and the write system call both release the GIL, so the transpose hides behind the I/O.
The blocks live in a small pool of reusable buffers (:data:`PIPE_BUFFERS` of
:data:`PIPE_BLOCK_BYTES`), so the extra memory stays a few blocks whatever the data size. The
thread writes through its own duplicate of the descriptor: if the writer is abandoned (an
exception while encoding), the pending writes go to the abandoned file, never to whatever file
later reuses the caller's descriptor number. Once the thread runs, flushed metadata goes through
it too (:meth:`Sink.flush`), in the one queue behind the payloads queued before it: every write
lands in the order it was made (a later write over an earlier one lands last), and the calling
thread goes on encoding while the system calls copy the bytes. :meth:`Sink.finish` waits for
every write (and reports its error) before cutting the file to size.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable
from itertools import repeat
from typing import BinaryIO

import numpy as np

from .._hdf5._lookup3 import lookup3, lookup3_in, lookup3_many
from ._writer_arrays import column_major_pieces

_FLUSH_BYTES = 4 << 20

WINDOW_BYTES = 5 << 20
"""Largest span of the metadata window: pieces land in it by offset (one copy each) and it is
written out, usually in one call, once its used part reaches 4 MiB. It starts at
:data:`_WINDOW_START` bytes and doubles as needed (a small file never holds megabytes); a piece
larger than it goes to the file on its own."""

_WINDOW_START = 64 << 10

PIPE_BLOCK_BYTES = 4 << 20
"""Size of one reusable transpose buffer (and the largest single ``pwrite`` of a transposed array)."""

PIPE_BUFFERS = 4
"""Buffers in the pool: one being filled, up to three queued or being written."""


class Sink:
    """Writes bytes at absolute offsets of an open binary file.

    The contract the writer keeps (and the window relies on): a payload's bytes (``put_large``,
    ``put_array``) and a checksummed header with its checksum are never written over by a later
    call, and a header is put once; other metadata may be written over (the later write wins).
    """

    def __init__(self, file: BinaryIO, on_write: Callable[[int], None] | None = None) -> None:
        self._file = file
        # Told the size of every payload and metadata write once its bytes are taken from the
        # caller's memory (progress; releasing the pages of a mapped source already copied).
        self._on_write = on_write
        self._fd = _descriptor(file)
        self._pipe: _WritePipe | None = None
        # The window: file bytes [base, base + WINDOW_BYTES) in a zeroed buffer (holes read as
        # zeros). ``used`` is its high-water mark; ``holes`` are ranges in it written elsewhere
        # (payloads), never written from the window; ``sums`` the (offset, length) of the
        # headers in it whose checksum goes after them.
        self._base = 0
        self._window, self._view = _new_window(_WINDOW_START)
        self._cap = _WINDOW_START
        self._used = 0
        self._holes: list[tuple[int, int]] = []
        self._sums: list[tuple[int, int]] = []
        # Pieces below the window (a header reserved before what it points to, filled in after
        # the window moved past it): written after the window, in the order they were put.
        self._late: list[tuple[int, bytes]] = []
        self._late_unsummed: list[int] = []
        self._late_bytes = 0
        self._spare: list[tuple[np.ndarray, int]] = []  # spent windows, to be zeroed and reused

    def put(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write a (small) piece of metadata at ``offset`` (buffered)."""
        pos = offset - self._base
        end = pos + len(data)
        if pos >= 0 and end <= self._cap:
            self._view[pos:end] = data
            if end > self._used:
                self._used = end
                if end >= _FLUSH_BYTES:
                    self.flush()
            return
        self._put_outside(offset, data, False)

    def put_checksummed(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` followed by its 4-byte lookup3 checksum (an HDF5 v2 object header).

        The checksums of all pieces buffered so far are computed together when they are flushed
        (:func:`treexchange._hdf5._lookup3.lookup3_in`).
        """
        pos = offset - self._base
        n = len(data)
        end = pos + n + 4
        if pos >= 0 and end <= self._cap:
            self._view[pos : pos + n] = data
            self._sums.append((pos, n))
            if end > self._used:
                self._used = end
                if end >= _FLUSH_BYTES:
                    self.flush()
            return
        self._put_outside(offset, data, True)

    def region(self, offset: int, n: int) -> np.ndarray | None:
        """The window's bytes ``[offset, offset + n)`` (zeros: nothing put there yet) as a
        writable ``uint8`` array, to be filled in place and then handed back with
        :meth:`region_done` before any other call; None when that span cannot be in the window
        (then :meth:`put` and :meth:`put_checksummed` it piece by piece)."""
        pos = offset - self._base
        if pos < 0 or n > WINDOW_BYTES:
            return None
        if pos + n > WINDOW_BYTES:
            if self._used:
                self.flush()  # the window moves to its high-water mark
                pos = offset - self._base
            if not self._used and pos + n > WINDOW_BYTES:
                self._base, pos = offset, 0  # an empty window starts at the piece
            if pos < 0 or pos + n > WINDOW_BYTES:
                return None
        if pos + n > self._cap:
            # A run of many elements: the window takes its largest size at once (fresh zero
            # pages cost nothing until filled) rather than doubling, each time a copy.
            self._grow(WINDOW_BYTES)
        if pos < self._used:
            return None  # (never: the writer asks for regions past everything put so far)
        return self._window[pos : pos + n]

    def region_done(self, offset: int, n: int, headers: list[tuple[np.ndarray, int]]) -> None:
        """The region of :meth:`region` is filled: ``headers`` holds object headers in it, as
        their positions in the region and their length (a kind of header each), whose checksums
        go in the 4 bytes after them (computed at the flush, as for :meth:`put_checksummed`)."""
        pos = offset - self._base
        for positions, length in headers:
            self._sums.extend(zip((positions + pos).tolist(), repeat(length)))
        if pos + n > self._used:
            self._used = pos + n
            if self._used >= _FLUSH_BYTES:
                self.flush()

    def _put_outside(self, offset: int, data: bytes | bytearray | memoryview, checksummed: bool) -> None:
        """A piece that does not fit the window where it stands."""
        n = len(data)
        base = self._base
        if offset + n <= base:  # below the window: a late piece
            self._late_put(offset, bytes(data), checksummed)
            return
        if checksummed:  # (only now: the checksum covers the piece whole, before any split)
            data = bytes(data) + lookup3(data).to_bytes(4, "little")
            n += 4
        if offset < base:  # across the window's start: the part below is a late piece
            cut = base - offset
            self._late_put(offset, bytes(data[:cut]), False)
            self.put(base, memoryview(data)[cut:])
            return
        # At or above the window's start, beyond its end.
        if offset - base + n <= WINDOW_BYTES:  # the window grows to take it
            self._grow(offset - base + n)
            self.put(offset, data)
            return
        if self._used:
            self.flush()  # the window moves to its high-water mark; the piece tries again
            self.put(offset, data)
            return
        self._base = offset  # an empty window starts at the piece
        if n <= WINDOW_BYTES:
            self.put(offset, data)
            return
        self._write_now(offset, data)  # larger than any window
        self._base = offset + n

    def _grow(self, size: int) -> None:
        cap = self._cap
        while cap < size:
            cap *= 2
        cap = min(cap, WINDOW_BYTES)
        window, view = _new_window(cap)
        window[: self._used] = self._window[: self._used]
        self._window, self._view, self._cap = window, view, cap

    def _late_put(self, offset: int, data: bytes, checksummed: bool) -> None:
        if checksummed:
            self._late_unsummed.append(len(self._late))
        self._late.append((offset, data))
        self._late_bytes += len(data) + 4 * checksummed
        if self._late_bytes >= _FLUSH_BYTES:
            self.flush()

    def _hole(self, offset: int, size: int) -> None:
        """Bytes ``[offset, offset + size)`` go to the file directly: the window skips them."""
        pos = offset - self._base
        if pos + size <= 0 or size == 0:
            return  # below the window (never written from it again)
        if pos < 0 or pos + size > self._cap:
            # Not inside the window: the window moves past the payload (flushing what it holds).
            if self._used:
                self.flush()
            self._base = max(self._base, offset + size)
            return
        self._holes.append((pos, pos + size))
        if pos + size > self._used:
            self._used = pos + size

    def put_large(self, offset: int, data: bytes | memoryview) -> None:
        """Write a payload at ``offset`` directly (no copy beyond the OS's); ``data`` must not be
        modified afterwards (it may be written later, by the writer thread)."""
        self._hole(offset, len(data))
        self._write_now(offset, data)

    def _write_now(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        if self._fd is None:
            self._file.seek(offset)
            self._file.write(data)
        else:
            self._pipeline().submit(offset, data)
        if self._on_write is not None:
            self._on_write(len(data))

    def put_array(self, offset: int, array: np.ndarray) -> int:
        """Write ``array``'s column-major little-endian bytes at ``offset``; returns their size.

        C-ordered input is transposed block by block into the pool's reusable buffers while the
        writer thread writes the previous blocks.
        """
        self._hole(offset, array.nbytes)
        if self._fd is None:
            pos = offset
            for piece in column_major_pieces(array):
                self._write_now(pos, piece)
                pos += len(piece)
            return pos - offset
        pipe = self._pipeline()
        pos = offset
        for piece in column_major_pieces(array, PIPE_BLOCK_BYTES, pipe.take):
            n = len(piece)
            pipe.submit(pos, piece)
            pos += n
            del piece  # the buffer goes back to the pool once written
            if self._on_write is not None:
                self._on_write(n)
        return pos - offset

    def _pipeline(self) -> _WritePipe:
        if self._pipe is None:
            assert self._fd is not None
            self._pipe = _WritePipe(self._fd)
        return self._pipe

    def flush(self) -> None:
        """Write out buffered metadata: the window (its used part, less its holes, with the
        checksums of its headers filled in), then the late pieces.

        Late pieces are sorted by offset and merged into runs of touching or overlapping pieces;
        each run is assembled in memory, applying its pieces in the order they were put (so a
        later write wins where two overlap), and written with one call.
        """
        runs: list[tuple[int, bytes | memoryview]] = []
        used = self._used
        spent: tuple[np.ndarray, int] | None = None  # the old window and how much of it was used
        if used:
            window, view = self._window, self._view
            if self._sums:
                offsets, lengths = zip(*self._sums)
                sums = lookup3_in(window, offsets, lengths)
                at = np.add.outer(np.add(offsets, lengths), np.arange(4))
                window[at] = sums.astype("<u4").view(np.uint8).reshape(-1, 4)
                self._sums = []
            pos = 0
            for start, stop in sorted(self._holes):
                if start > pos:
                    runs.append((self._base + pos, view[pos:start]))
                pos = max(pos, stop)
            if used > pos:
                runs.append((self._base + pos, view[pos:used]))
            self._holes = []
            self._base += used
            self._used = 0
            # The runs keep the old buffer alive until written; another takes its place: one
            # written out before, zeroed again (fresh zero pages cost a page fault each, which on
            # a busy virtual machine made a 100,000-leaf save 10 % slower), or a new one.
            spent = (window, used)
            self._window, self._view = self._next_window()
        if self._late:
            runs += self._late_runs()
        if not runs:
            return
        nbytes = sum(len(data) for _, data in runs)
        if self._fd is not None and (self._pipe is not None or nbytes >= _FLUSH_BYTES):
            # Written by the writer thread, behind the payloads queued before (one queue, in
            # order: a later write over an earlier one still lands last), while this thread
            # goes on encoding. Small files (a last flush, no pipe yet) are written here.
            self._pipeline().submit_runs(runs, spent)
        else:
            for start, data in runs:
                if self._fd is not None:
                    _pwrite_all(self._fd, data, start)
                else:
                    self._file.seek(start)
                    self._file.write(data)
            del runs
            if spent is not None:
                self._spare.append(spent)
        if self._on_write is not None:
            self._on_write(nbytes)

    def _next_window(self) -> tuple[np.ndarray, memoryview]:
        """A zeroed window of the current capacity: a spent one (written out: by this thread,
        or returned by the writer thread) with its used part zeroed, else a new one."""
        spare = self._spare
        if self._pipe is not None:
            windows = self._pipe.windows
            while True:
                try:
                    spare.append(windows.get_nowait())
                except queue.Empty:
                    break
        while spare:
            window, used = spare.pop()
            if len(window) == self._cap:
                window[:used] = 0
                return window, window.data
        return _new_window(self._cap)

    def _late_runs(self) -> list[tuple[int, bytes]]:
        pending = self._late
        if self._late_unsummed:
            unsummed, self._late_unsummed = self._late_unsummed, []
            sums = lookup3_many([pending[i][1] for i in unsummed])
            for i, value in zip(unsummed, sums):
                offset, data = pending[i]
                pending[i] = (offset, data + value.to_bytes(4, "little"))
        offsets = [offset for offset, _ in pending]
        order = sorted(range(len(pending)), key=offsets.__getitem__)
        runs: list[tuple[int, bytes]] = []
        run: list[int] = []
        run_start = run_end = -1
        overlaps = False
        for i in order:
            offset, data = pending[i]
            if run and offset <= run_end:
                overlaps |= offset < run_end
                run.append(i)
                end = offset + len(data)
                if end > run_end:
                    run_end = end
                continue
            if run:
                runs.append((run_start, self._join_run(run, run_start, run_end, overlaps)))
            run, run_start, run_end, overlaps = [i], offset, offset + len(data), False
        if run:
            runs.append((run_start, self._join_run(run, run_start, run_end, overlaps)))
        self._late = []
        self._late_bytes = 0
        return runs

    def _join_run(self, run: list[int], start: int, end: int, overlaps: bool) -> bytes:
        """The bytes of the late pieces ``run`` (indexes in offset order) covering ``start:end``."""
        pending = self._late
        if len(run) == 1:
            return pending[run[0]][1]
        if not overlaps:  # pieces end to end (the usual case): one join
            return b"".join([pending[i][1] for i in run])
        buf = bytearray(end - start)
        for i in sorted(run):  # insertion order: later writes win
            offset, piece = pending[i]
            buf[offset - start : offset - start + len(piece)] = piece
        return bytes(buf)

    def drain(self) -> None:
        """Wait until every payload write is done; raise the first error one of them had."""
        if self._pipe is not None:
            self._pipe.drain()

    def finish(self, size: int) -> None:
        """Flush, wait for every write, and cut the file to exactly ``size`` bytes."""
        self.flush()
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            pipe.close()
        self._file.truncate(size)
        self._file.flush()


def _new_window(size: int) -> tuple[np.ndarray, memoryview]:
    # np.zeros of a large size maps fresh zero pages: no memset, pages are touched as filled.
    window = np.zeros(size, dtype=np.uint8)
    return window, window.data


def _descriptor(file: BinaryIO) -> int | None:
    """The OS descriptor to ``pwrite`` to, or None (in-memory files, platforms without pwrite)."""
    if not hasattr(os, "pwrite"):  # pragma: no cover - Windows
        return None
    try:
        fd = file.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None
    file.flush()  # nothing of the caller's may sit in the file object's buffer behind our writes
    return fd


_Job = tuple[
    int,
    "bytes | bytearray | memoryview | list[tuple[int, bytes | memoryview]]",
    "np.ndarray | None",
    "tuple[np.ndarray, int] | None",
]
"""A write for the writer thread: (offset, bytes, buffer to return to the pool, None), or (-1, a
list of (offset, bytes) runs, None, the window they view and its used size) for a flush of
buffered metadata."""


class _PipeState:
    """What the writer thread shares with the producer (never the Sink itself, so an abandoned
    Sink is collected and its finalizer stops the thread)."""

    def __init__(self, fd: int) -> None:
        self.fd = os.dup(fd)
        self.jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=PIPE_BUFFERS - 1)
        self.free: queue.Queue[np.ndarray] = queue.Queue()
        self.windows: queue.Queue[tuple[np.ndarray, int]] = queue.Queue()  # spent metadata windows
        self.error: BaseException | None = None


def _write_loop(state: _PipeState) -> None:
    try:
        while True:
            job = state.jobs.get()
            if job is None:
                state.jobs.task_done()
                return
            offset, data, buf, spent = job
            if state.error is None:
                try:
                    if isinstance(data, list):  # buffered metadata: (offset, bytes) runs
                        for at, piece in data:
                            _pwrite_all(state.fd, piece, at)
                    else:
                        _pwrite_all(state.fd, data, offset)
                except BaseException as err:  # reported to the producer by drain()/submit()
                    state.error = err
            del job, data
            if buf is not None:
                state.free.put(buf)
            if spent is not None:
                state.windows.put(spent)  # written: the producer may zero and reuse it
            state.jobs.task_done()
    finally:
        os.close(state.fd)


def _pwrite_all(fd: int, data: memoryview | bytes | bytearray, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view, offset)
        if n <= 0:
            raise OSError("pwrite wrote nothing")
        view = view[n:]
        offset += n


class _WritePipe:
    """A writer thread with a bounded queue and a pool of reusable block buffers."""

    def __init__(self, fd: int) -> None:
        self._state = state = _PipeState(fd)
        self._buffers = 0
        self._taken: list[np.ndarray] = []
        self._thread = threading.Thread(
            target=_write_loop, args=(state,), name="treexchange-writer", daemon=True
        )
        self._thread.start()
        # An abandoned pipe (the writer raised and was dropped) still stops its thread.
        self._finalizer = weakref.finalize(self, state.jobs.put, None)

    def take(self, nbytes: int) -> np.ndarray:
        """A free buffer of at least ``nbytes`` (waits for the writer to return one when all
        :data:`PIPE_BUFFERS` are in use); it returns to the pool after the next :meth:`submit`."""
        if nbytes > PIPE_BLOCK_BYTES:
            buf = np.empty(nbytes, np.uint8)  # larger than a block (never from column_major_pieces)
        else:
            try:
                buf = self._state.free.get_nowait()
            except queue.Empty:
                if self._buffers < PIPE_BUFFERS:
                    self._buffers += 1
                    buf = np.empty(PIPE_BLOCK_BYTES, np.uint8)
                else:
                    buf = self._get_free()
        self._taken.append(buf)
        return buf

    def _get_free(self) -> np.ndarray:
        while True:
            self._raise_error()
            try:
                return self._state.free.get(timeout=0.5)
            except queue.Empty:
                if not self._thread.is_alive():  # pragma: no cover - the thread never dies early
                    raise OSError("the writer thread stopped") from None

    def submit(self, offset: int, data: memoryview | bytes | bytearray) -> None:
        """Queue ``data`` to be written at ``offset`` (waits while the queue is full); the buffer
        last taken with :meth:`take` goes back to the pool once it is written."""
        self._raise_error()
        buf = self._taken.pop() if self._taken else None
        self._state.jobs.put((offset, data, buf, None))

    @property
    def windows(self) -> queue.Queue[tuple[np.ndarray, int]]:
        """Metadata windows written out (see :meth:`submit_runs`), with their used sizes."""
        return self._state.windows

    def submit_runs(
        self, runs: list[tuple[int, bytes | memoryview]], spent: tuple[np.ndarray, int] | None = None
    ) -> None:
        """Queue pieces of metadata, each ``(offset, bytes)``, written in order as one job;
        ``spent`` (the window they view, its used size) is handed back through
        :attr:`windows` once they are written."""
        self._raise_error()
        self._state.jobs.put((-1, runs, None, spent))

    def drain(self) -> None:
        self._state.jobs.join()
        self._raise_error()

    def close(self) -> None:
        """Wait for every write, stop the thread (closing its descriptor), report any error."""
        if self._finalizer.alive:
            self._finalizer()  # queues the stop marker
            self._thread.join()
        self._raise_error()

    def _raise_error(self) -> None:
        err = self._state.error
        if err is not None:
            raise err
