"""Atomic file replacement, the one way every writer of the package puts a file in place.

A writer's bytes go to a temporary file beside the target, which is flushed and fsynced, then
renamed over the target (``os.replace``), and the directory is fsynced: a crash at any point leaves
the previous file or the complete new one, never a partial file (see :func:`atomic_write`). Below
the codec in the layer order, so that every layer that writes (``save``, the conversions) uses it.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from typing import BinaryIO

from ._errors import TreexchangeError, WriteError

PathLike = str | os.PathLike[str]


def atomic_write(
    path: PathLike,
    write: Callable[[BinaryIO], None],
    *,
    check: Callable[[str], None] | None = None,
    fsync: bool = True,
) -> None:
    """Run ``write(f)`` on a temporary file beside ``path``, then atomically replace ``path``.

    ``check``, if given, is called with a path that reads the temporary file once it is complete,
    before it is put in place; an exception from it leaves ``path`` untouched (``convert`` reads
    its output back there).

    Where the platform has it (Linux, on file systems with ``O_TMPFILE``), the temporary file has
    no name while it is written and checked: a process killed then leaves nothing behind. At
    commit it is linked into the directory under a temporary name (through ``/proc/self/fd``)
    and renamed onto ``path`` at once (a kill between the two leaves that whole file, which the
    next call removes). Elsewhere, or when the file system
    refuses, it is a named file ``.<name>.txtmp<pid>-<random>.tmp`` (``<name>`` cut to 200 bytes,
    so any legal file name still leaves room) in the same directory, which a kill can leave
    behind; every call first removes those of dead processes (:func:`remove_stale_temporaries`).

    Sequence: write, flush, ``check``, ``fsync`` the file, set the final permission bits, (link
    the unnamed file,) ``os.replace`` it onto ``path``, ``fsync`` the directory (so the rename
    itself survives a power cut). On any exception before the rename, ``KeyboardInterrupt``
    included, the temporary file is closed and deleted and ``path`` is untouched. Once the rename
    has happened (checked by the file's identity, not by where the exception struck), an
    exception such as a ``KeyboardInterrupt`` is not reported: the new file is complete and in
    place.

    If ``path`` is a symbolic link, the file it points to is replaced and the link is kept (as
    ``open(path, "wb")`` would). An existing file's permission bits (``0o777``; never setuid,
    setgid or sticky) are kept; a new file gets the usual ``0o666 & ~umask``. The temporary file
    is ``0o600`` until its data is complete, checked and fsynced, just before the rename: a
    private checkpoint is never readable by others while it is written, nor in a leftover
    temporary file. ``fsync=False`` skips the ``fsync`` calls (scratch files: atomic, not
    durable).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> atomic_write(p, lambda f: f.write(b"hello"))
        >>> open(p, "rb").read(), sorted(os.listdir(os.path.dirname(p)))
        (b'hello', ['x.bin'])
    """
    # realpath: replacing a symlink's target, not the link (a dangling link names the file to create).
    target = os.path.realpath(os.fspath(path))
    directory = os.path.dirname(target)
    base = os.path.basename(target)
    if not base:
        raise WriteError(f"not a file path: {os.fspath(path)!r}")
    remove_stale_temporaries(directory)
    f: BinaryIO | None = None
    tmp: str | None = None  # the temporary file's name, once it has one (it is then ours to remove)
    written: os.stat_result | None = None  # the new file, once complete: is it at ``target``?
    try:
        f = _open_unnamed(directory) if UNNAMED_TEMPORARIES else None
        if f is None:
            tmp = _temporary_name(directory, base)
            try:
                # One call makes the file object: an interrupt cannot leave a bare descriptor behind.
                f = open(tmp, "x+b", opener=_private_opener)  # closed below, on every path
            except OSError as err:
                tmp = None  # nothing was created (or it is not ours): leave it
                raise WriteError(
                    f"cannot create a temporary file in {directory}: {err.strerror or err}"
                ) from err
        write(f)
        f.flush()
        if check is not None:
            check(tmp if tmp is not None else _fd_path(f))  # raises to keep the target untouched
        if fsync:
            os.fsync(f.fileno())
        # Private until now, so that a kill during the write, the check or the fsync leaves no
        # readable copy; the mode change is a journaled metadata update that the directory fsync
        # after the rename makes durable with it.
        _set_mode(f, tmp, _final_mode(target))
        if tmp is None:
            # Linked and renamed at once (a kill between the two leaves a named file, which the
            # next save removes); closed after the rename, which Linux allows.
            tmp, written = _link_unnamed(f, _temporary_name(directory, base), fsync)
            os.replace(tmp, target)
            f.close()
        else:
            written = os.fstat(f.fileno())
            f.close()  # before the rename, which Windows refuses on an open file
            os.replace(tmp, target)
        if fsync:
            _fsync_directory(directory)
    except BaseException as err:
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
        if written is not None and _is_in_place(target, written):
            # The rename happened: the complete new file is at ``target`` and the save succeeded.
            # An interrupt (Ctrl-C) that arrived after it must not report a failure (nor remove
            # anything); the directory fsync it may have cut short is done now.
            if fsync:
                _fsync_directory(directory)
            return
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(err, OSError) and not isinstance(err, TreexchangeError):
            raise WriteError(f"writing {target} failed: {err}") from err
        raise


UNNAMED_TEMPORARIES = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
"""Whether :func:`atomic_write` tries an unnamed temporary file first (``O_TMPFILE``, Linux).
False elsewhere; tests set it to False to exercise the named fallback."""


def _open_unnamed(directory: str) -> BinaryIO | None:
    """An unnamed file in ``directory`` (``O_TMPFILE``, mode ``0o600``), or None when the kernel,
    the file system or ``/proc`` refuses (the caller then makes a named one)."""

    def opener(_: str, flags: int) -> int:
        return os.open(directory or ".", os.O_TMPFILE | os.O_RDWR | getattr(os, "O_CLOEXEC", 0), 0o600)

    try:
        # One call makes the file object: an interrupt cannot leave a bare descriptor behind.
        f: BinaryIO = open(directory or ".", "w+b", opener=opener)  # closed by the caller
    except OSError:
        return None  # EOPNOTSUPP, EISDIR (no O_TMPFILE), EACCES...: the named path reports real errors
    if not os.path.exists(_fd_path(f)):  # no /proc here: no way to link the file at commit
        f.close()
        return None
    return f


def _fd_path(f: BinaryIO) -> str:
    """A path that opens the same file as ``f`` (Linux's ``/proc``), for an unnamed file."""
    return f"/proc/self/fd/{f.fileno()}"


def _link_unnamed(f: BinaryIO, name: str, fsync: bool) -> tuple[str, os.stat_result]:
    """Give the unnamed file ``f`` the name ``name``; returns it and the named file's ``stat``.

    ``linkat`` through ``/proc/self/fd`` (with ``AT_SYMLINK_FOLLOW``) needs no privilege, unlike
    ``AT_EMPTY_PATH``; where it is refused anyway, the bytes are copied to a new file of that
    name (removed again if the copy fails).
    """
    identity = os.fstat(f.fileno())
    try:
        # A directory descriptor makes os.link call linkat with AT_SYMLINK_FOLLOW (a plain
        # link(2) would link the /proc entry itself, a symbolic link on another file system: EXDEV).
        procfd = os.open("/proc/self/fd", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.link(str(f.fileno()), name, src_dir_fd=procfd, follow_symlinks=True)
        finally:
            os.close(procfd)
        return name, identity
    except FileExistsError:
        raise  # not ours (12 random hex digits make this all but impossible): leave it
    except OSError:
        pass
    copy = open(name, "x+b", opener=_private_opener)  # closed below, on every path
    try:
        f.seek(0)
        shutil.copyfileobj(f, copy, 1 << 20)
        copy.flush()
        os.fchmod(copy.fileno(), stat.S_IMODE(identity.st_mode))
        if fsync:
            os.fsync(copy.fileno())
        identity = os.fstat(copy.fileno())
    except BaseException:
        copy.close()
        os.unlink(name)
        raise
    copy.close()
    return name, identity


def _temporary_name(directory: str, base: str) -> str:
    return os.path.join(directory, f".{_shortened(base)}.{_TMP_TAG}{os.getpid()}-{secrets.token_hex(6)}.tmp")


_TMP_TAG = "txtmp"
"""Marks treexchange's temporary files: ``.<name>.txtmp<pid>-<12 hex digits>.tmp``."""

_TMP_PATTERN = re.compile(r"^\..*\." + _TMP_TAG + r"(\d+)-[0-9a-f]{12}\.tmp$", re.DOTALL)


def remove_stale_temporaries(directory: str) -> list[str]:
    """Delete the temporary files that killed saves left in ``directory``; returns their names.

    A temporary file is stale when the process named in it (``.<name>.txtmp<pid>-<hex>.tmp``) no
    longer exists. Only regular files owned by the current user are touched; files of live
    processes (a save running now) and of this process are left alone. Every ``save`` and
    ``convert`` calls this first, so what a SIGKILL leaves behind does not outlive the next save
    to the same directory. (Processes in another PID namespace sharing the directory look dead:
    their temporary files would be removed; run such writers with distinct directories.)

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> dead = 2**22 + 1  # above Linux's largest PID: no such process
        >>> stale = os.path.join(d, f".m.jld2.txtmp{dead}-0123456789ab.tmp")
        >>> open(stale, "wb").close()
        >>> remove_stale_temporaries(d), os.listdir(d)
        (['.m.jld2.txtmp4194305-0123456789ab.tmp'], [])
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory or "."))
    except OSError:
        return removed
    me = os.getpid()
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    for entry in entries:
        match = _TMP_PATTERN.match(entry.name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid == me or _process_exists(pid):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid):
                continue
            os.unlink(entry.path)
        except OSError:
            continue  # gone meanwhile, or not ours to remove
        removed.append(entry.name)
    return removed


def _process_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists (another user's), or cannot tell: keep its file
    return True


def _is_in_place(target: str, written: os.stat_result) -> bool:
    """Whether ``target`` is the file whose ``fstat`` was ``written`` (the rename happened)."""
    try:
        now = os.stat(target)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (written.st_dev, written.st_ino)


_TMP_NAME_BYTES = 200
"""Longest piece of the target's name kept in the temporary file's name: with the dot, the 12
random hex digits and the suffix, the name stays within the usual 255-byte limit."""


def _shortened(base: str) -> str:
    """``base`` cut to :data:`_TMP_NAME_BYTES` bytes of UTF-8 (never inside a character).

    Example:
        >>> len(_shortened("x" * 250)), _shortened("σ" * 150) == "σ" * 100
        (200, True)
    """
    raw = os.fsencode(base)
    if len(raw) <= _TMP_NAME_BYTES:
        return base
    return os.fsdecode(raw[:_TMP_NAME_BYTES].decode("utf-8", errors="ignore").encode("utf-8"))


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _final_mode(target: str) -> int:
    """The permission bits the new file gets: the replaced file's, else ``0o666 & ~umask``."""
    try:
        return os.stat(target).st_mode & 0o777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # Linux reports the umask without changing it; elsewhere set-and-restore is the only way.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _set_mode(f: BinaryIO, tmp: str | None, mode: int) -> None:
    if hasattr(os, "fchmod") or tmp is None:
        os.fchmod(f.fileno(), mode)
    else:  # pragma: no cover - Windows before Python 3.13
        os.chmod(tmp, mode)


def _fsync_directory(directory: str) -> None:
    # Makes the rename durable on POSIX; not possible (nor needed) on Windows.
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
