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
:data:`PIPE_BLOCK_BYTES`), so the extra memory stays a few blocks whatever the data size. Each
block sits in its buffer aligned as its file offset is, so that its aligned middle goes to the
disk with ``O_DIRECT`` (no copy into the page cache, and the disk writes while the next block is
transposed; see :func:`_write_block`). The
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

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows (no direct writes there)
    fcntl = None  # type: ignore[assignment]

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

DIRECT_ALIGN = 4096
"""Alignment (file offset, length and memory address) of the transposed blocks' direct writes:
a multiple of every common logical block size."""

DIRECT_WRITES = hasattr(os, "O_DIRECT") and fcntl is not None and os.path.isdir("/proc/self/fd")
"""Whether transposed blocks go to the file with ``O_DIRECT`` (see :func:`_write_block`); tests
and benchmarks set it to False to compare with the page-cache path."""

_DIRECT_MIN = 512 << 10
"""Smallest aligned middle written directly; a smaller one goes through the page cache with its
edges. Each direct write waits for the disk: for arrays of 128 and 256 KiB that made a save
12-30 % slower than through the page cache, from 512 KiB on it was faster (measured, load 8)."""


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

        def take(nbytes: int) -> np.ndarray:
            # The piece is the file's bytes from ``pos``: placed in its buffer at the same
            # distance from an aligned address as ``pos`` from an aligned offset (direct writes).
            return pipe.take(nbytes, pos % DIRECT_ALIGN)

        for piece in column_major_pieces(array, PIPE_BLOCK_BYTES, take):
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


def _aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialized ``uint8`` array of ``nbytes`` starting at a :data:`DIRECT_ALIGN` address."""
    raw = np.empty(nbytes + DIRECT_ALIGN, np.uint8)
    start = -raw.ctypes.data % DIRECT_ALIGN
    return raw[start : start + nbytes]


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
        # A second descriptor of the same file, opened with O_DIRECT at the first aligned block
        # (None: not yet; -1: refused, or a direct write failed: the page cache from then on).
        self.direct_fd: int | None = None if DIRECT_WRITES else -1
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
                    elif buf is not None:  # a block of the pool: its memory is aligned like offset
                        _write_block(state, data, offset)
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
        if state.direct_fd is not None and state.direct_fd >= 0:
            os.close(state.direct_fd)


def _write_block(state: _PipeState, data: memoryview | bytes | bytearray, offset: int) -> None:
    """Write a transposed block (``data`` at an address congruent to ``offset`` modulo
    :data:`DIRECT_ALIGN`): its aligned middle with ``O_DIRECT``, the edges through the page cache.

    A direct write takes the bytes from the buffer to the disk: no copy into the page cache
    (which costs as much CPU as the transpose itself), and the disk works while the next blocks
    are transposed instead of at the final ``fsync``. The edges share their file blocks with
    other bytes (metadata, the next array) and are written as before; the middle's blocks are
    only ever written here (a payload is never written over), so the page cache never holds a
    stale copy of them. Where the file system refuses (``open`` or a write fails: tmpfs, some
    network or FUSE file systems), the middle goes through the page cache too, and so does
    every later block of this file.
    """
    view = memoryview(data).cast("B")
    n = len(view)
    head = -offset % DIRECT_ALIGN
    middle = (n - head) // DIRECT_ALIGN * DIRECT_ALIGN if n > head else 0
    if middle < _DIRECT_MIN or state.direct_fd == -1:
        _pwrite_all(state.fd, view, offset)
        return
    if state.direct_fd is None:
        state.direct_fd = _open_direct(state.fd)
    if state.direct_fd >= 0:
        try:
            _pwrite_all(state.direct_fd, view[head : head + middle], offset + head)
        except OSError:
            os.close(state.direct_fd)
            state.direct_fd = -1
    if state.direct_fd == -1:
        _pwrite_all(state.fd, view[head : head + middle], offset + head)
    if head:
        _pwrite_all(state.fd, view[:head], offset)
    if head + middle < n:
        _pwrite_all(state.fd, view[head + middle :], offset + head + middle)


def _open_direct(fd: int) -> int:
    """A new descriptor of ``fd``'s file for direct writes, or -1 (refused, or ``fd`` is not open
    for writing: the reopened file must give no access the caller's did not). Reopened through
    ``/proc/self/fd`` (an unnamed temporary file has no other name); ``fcntl(F_SETFL)`` on ``fd``
    would change the caller's descriptor as well (a duplicate shares its flags)."""
    try:
        if not fcntl.fcntl(fd, fcntl.F_GETFL) & (os.O_WRONLY | os.O_RDWR):
            return -1
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return -1


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
        self._taken: list[np.ndarray | None] = []
        self._thread = threading.Thread(
            target=_write_loop, args=(state,), name="treexchange-writer", daemon=True
        )
        self._thread.start()
        # An abandoned pipe (the writer raised and was dropped) still stops its thread.
        self._finalizer = weakref.finalize(self, state.jobs.put, None)

    def take(self, nbytes: int, shift: int = 0) -> np.ndarray:
        """A free buffer of at least ``nbytes`` whose start is ``shift`` bytes past an address
        aligned to :data:`DIRECT_ALIGN` (waits for the writer to return one when all
        :data:`PIPE_BUFFERS` are in use); it returns to the pool after the next :meth:`submit`.
        Larger than a block: a fresh array, written through the page cache."""
        if nbytes > PIPE_BLOCK_BYTES:
            self._taken.append(None)
            return np.empty(nbytes, np.uint8)  # never from column_major_pieces
        try:
            buf = self._state.free.get_nowait()
        except queue.Empty:
            if self._buffers < PIPE_BUFFERS:
                self._buffers += 1
                buf = _aligned_empty(PIPE_BLOCK_BYTES + DIRECT_ALIGN)
            else:
                buf = self._get_free()
        self._taken.append(buf)
        return buf[shift:]

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
