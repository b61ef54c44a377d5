"""Atomic replace: an exception, or a SIGKILL at any moment, never leaves a partial file at the
target and never damages the file that was there."""

from __future__ import annotations

import contextlib
import inspect
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import treexchange
import treexchange._atomic as atomic
import treexchange._save
from treexchange import ConversionError, NamedTuple, WriteError

N = 2_000_000  # 16 MB per version: a save takes long enough to be killed in the middle


def reference_bytes(tmp: Path, k: int) -> bytes:
    p = tmp / f"ref{k}.jld2"
    treexchange.save(p, x=np.full(N, k, np.int64), producer=" (atomic test)")
    return p.read_bytes()


def test_exception_leaves_target_and_directory_untouched(tmp_path: Path) -> None:
    target = tmp_path / "model.jld2"
    treexchange.save(target, x=np.arange(10))
    before = target.read_bytes()
    bad = NamedTuple(big=np.ones(1_000_000), then=[1, 2, object()])  # fails after data was written
    with pytest.raises(ConversionError):
        treexchange.save(target, model_state=bad)
    assert target.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["model.jld2"]


def test_interrupt_leaves_target_untouched(tmp_path: Path) -> None:
    from treexchange._save import atomic_write

    target = tmp_path / "t.bin"
    target.write_bytes(b"old")

    def write(f: object) -> None:
        f.write(b"partial")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, write)
    assert target.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["t.bin"]


def test_unwritable_directory_raises_write_error(tmp_path: Path) -> None:
    with pytest.raises(WriteError):
        treexchange.save(tmp_path / "missing-dir" / "x.jld2", x=1)


def test_mode_of_existing_file_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "m.jld2"
    treexchange.save(target, x=1)
    os.chmod(target, 0o640)
    treexchange.save(target, x=2)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert treexchange.load(target, "x") == 2


def test_symlink_target_is_replaced_and_link_kept(tmp_path: Path) -> None:
    real_dir = tmp_path / "store"
    real_dir.mkdir()
    real = real_dir / "model-v1.jld2"
    treexchange.save(real, x=1)
    link = tmp_path / "latest.jld2"
    link.symlink_to(real)
    treexchange.save(link, x=2)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert treexchange.load(real, "x") == 2 and treexchange.load(link, "x") == 2
    assert sorted(os.listdir(real_dir)) == ["model-v1.jld2"]  # the temporary file went beside the target
    assert sorted(os.listdir(tmp_path)) == ["latest.jld2", "store"]
    # A dangling link names the file to create.
    dangling = tmp_path / "next.jld2"
    dangling.symlink_to(real_dir / "model-v2.jld2")
    treexchange.save(dangling, x=3)
    assert dangling.is_symlink() and treexchange.load(real_dir / "model-v2.jld2", "x") == 3


def test_private_file_is_never_readable_by_others(tmp_path: Path) -> None:
    from treexchange._save import atomic_write

    target = tmp_path / "secret.jld2"
    treexchange.save(target, x=1)
    os.chmod(target, 0o600)
    seen: list[int] = []

    def write(f: object) -> None:
        f.write(b"payload")  # type: ignore[attr-defined]
        seen.append(stat.S_IMODE(os.fstat(f.fileno()).st_mode))  # type: ignore[attr-defined]

    atomic_write(target, write)
    assert seen == [0o600]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600 and target.read_bytes() == b"payload"


def test_new_file_mode_follows_umask_and_special_bits_are_dropped(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        treexchange.save(tmp_path / "new.jld2", x=1)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.jld2").st_mode) == 0o640
    target = tmp_path / "shared.jld2"
    treexchange.save(target, x=1)
    os.chmod(target, 0o2775)  # setgid is not carried over to the new file
    treexchange.save(target, x=2)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o775


def test_longest_legal_name_can_be_written(tmp_path: Path) -> None:
    for name in ("x" * 250 + ".jld2", "σ" * 125 + ".jld2"):  # 255 bytes: the usual NAME_MAX
        target = tmp_path / name
        treexchange.save(target, x=1)
        assert treexchange.load(target, "x") == 1
    assert len(os.listdir(tmp_path)) == 2


def test_interrupt_inside_the_open_still_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A Ctrl-C that arrives as the temporary file is being created (after the file exists, before
    # the descriptor is in hand) must not leave the file behind.
    from treexchange._save import atomic_write

    real_open = os.open

    def interrupted_open(path: str, flags: int, mode: int = 0o777, **kwargs: object) -> int:
        fd = real_open(path, flags, mode, **kwargs)  # type: ignore[arg-type]
        if str(path).endswith(".tmp"):
            os.close(fd)
            raise KeyboardInterrupt
        return fd

    target = tmp_path / "t.bin"
    target.write_bytes(b"old")
    monkeypatch.setattr("treexchange._atomic.UNNAMED_TEMPORARIES", False)  # a named file is opened
    monkeypatch.setattr(os, "open", interrupted_open)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, lambda f: f.write(b"new"))
    monkeypatch.undo()
    assert target.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["t.bin"]


CHILD = textwrap.dedent(
    """
    import sys, numpy as np, treexchange, treexchange._atomic, treexchange._save
    target, n, kind, op, sources = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
    treexchange._atomic.UNNAMED_TEMPORARIES = kind == "unnamed"
    print("ready", flush=True)
    for k in range(1, 10_000):
        print("start", k, flush=True)
        if op == "save":
            treexchange.save(target, x=np.full(n, k, np.int64), producer=" (atomic test)")
        else:
            treexchange._save.convert(sources[k % 2], target, keep_producer=True)
        print("done", k, flush=True)
    """
)


def _temporaries(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith(".") and p.suffix == ".tmp"]


def _kill_children(
    tmp_path: Path, op: str, kind: str, kills: int, enough: int | None = None
) -> tuple[int, list[int]]:
    """SIGKILL ``kills`` child processes that save (or convert) the target over and over, each
    at a random moment; after each kill the target must be one complete version, byte for byte.
    Returns how many kills struck inside a save (or convert) call and the permission bits of
    every temporary file left behind (each removed before the next child starts). With
    ``enough``, stops after that many kills once a temporary file has been left."""
    target = tmp_path / "model.jld2"
    expected = {reference_bytes(tmp_path, k) for k in range(0, 2)}
    sources = [str(tmp_path / f"ref{k}.jld2") for k in range(0, 2)]
    target.write_bytes((tmp_path / "ref0.jld2").read_bytes())
    t0 = time.perf_counter()  # one call, to spread the kills over a few calls
    if op == "save":
        treexchange.save(tmp_path / "timing.jld2", x=np.full(N, 7, np.int64))
    else:
        treexchange._save.convert(sources[1], tmp_path / "timing.jld2", keep_producer=True)
    one_call = time.perf_counter() - t0
    (tmp_path / "timing.jld2").unlink()
    inside, modes = 0, []
    for seed in range(kills):
        if enough is not None and seed >= enough and modes:
            break  # enough kills, and one of them left a temporary file to look at
        rng = random.Random(seed)
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(target), str(N), kind, op, *sources],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 2.5 * one_call))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        said = proc.stdout.read().split()
        proc.stdout.close()  # (the pipe's file, not left to the collector: no ResourceWarning)
        inside += len(said) >= 2 and said[-2] == "start"  # killed between "start k" and "done k"
        raw = target.read_bytes()
        if raw not in expected:  # a save of another k: compare with that version's bytes
            expected.add(reference_bytes(tmp_path, int(treexchange.load(target, "x")[0])))
        assert raw in expected, f"seed {seed}: target is not a complete version"
        for p in _temporaries(tmp_path):
            modes.append(stat.S_IMODE(p.stat().st_mode))
            if kind == "unnamed":  # left only between its link and its rename: a whole version
                body = p.read_bytes()
                if body not in expected:  # (a save of a k the target never held: that version's bytes)
                    with contextlib.suppress(treexchange.TreexchangeError):
                        expected.add(reference_bytes(tmp_path, int(treexchange.load(p, "x")[0])))
                assert body in expected, f"seed {seed}: a partial temporary file was left"
            p.unlink()
    return inside, modes


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
@pytest.mark.skipif(not atomic.UNNAMED_TEMPORARIES, reason="needs O_TMPFILE and /proc (Linux)")
# Each way of writing is killed in the default tier once: the unnamed temporary file under a convert
# (which also reads the source and checks the written file before the rename: more moments to
# strike), the named one under a save (here and in the test after). The other two pairings, the
# same atomic_write, are in the slow tier (the unnamed file under a save 12 s on a slow machine,
# the named one under a convert 4 s).
@pytest.mark.parametrize("op", [pytest.param("save", marks=pytest.mark.slow), "convert"])
def test_sigkill_leaves_no_temporary_file_with_o_tmpfile(tmp_path: Path, op: str) -> None:
    # 20 kills of a child that saves (converts) over and over: the temporary file has no name
    # until it is complete, checked and fsynced, and the target is whole after every kill. It is
    # linked to its temporary name and renamed onto the target at once (no system call does both
    # to an unnamed file): a kill in that instant (seen once, in CI, during a convert) leaves it
    # named, whole (checked in _kill_children) and with the target's mode, for the next save to
    # remove (its process is dead: atomic.remove_stale_temporaries).
    inside, modes = _kill_children(tmp_path, op, "unnamed", kills=20)
    final = stat.S_IMODE((tmp_path / "model.jld2").stat().st_mode)
    assert len(modes) <= 2 and all(mode == final for mode in modes), modes
    assert inside >= 5, f"only {inside} of 20 kills struck inside a {op}: the test proved little"


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
@pytest.mark.parametrize("op", ["save", pytest.param("convert", marks=pytest.mark.slow)])
def test_sigkill_with_named_temporaries_leaves_only_private_files(tmp_path: Path, op: str) -> None:
    # The fallback (no O_TMPFILE): a kill may leave the named temporary file, always 0o600 (even a
    # complete one being verified by convert), never a damaged target.
    # Where a kill lands is up to the scheduler (convert reads its source before it creates the
    # temporary file): kill until one left a file, 20 at most.
    inside, modes = _kill_children(tmp_path, op, "named", kills=20, enough=6)
    assert inside >= 1 and modes, "no kill struck inside a write: the test proved nothing"
    assert set(modes) == {0o600}, modes


def _interrupt_at(code: Any, line_text: str, nth: int = 0) -> Callable[..., Any]:
    """A trace function raising ``KeyboardInterrupt`` when ``code`` reaches the ``nth`` line
    holding ``line_text`` (before it runs): a Ctrl-C arriving at exactly that point."""
    lines, first = inspect.getsourcelines(code)
    lineno = [first + i for i, text in enumerate(lines) if text.strip() == line_text][nth]

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == lineno:
            raise KeyboardInterrupt
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    return tracer


@pytest.mark.parametrize("unnamed", [True, False] if atomic.UNNAMED_TEMPORARIES else [False])
def test_interrupt_after_the_rename_is_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unnamed: bool
) -> None:
    from treexchange._save import atomic_write

    monkeypatch.setattr(atomic, "UNNAMED_TEMPORARIES", unnamed)
    replace_line = 0 if unnamed else 1  # the unnamed file's rename comes first in the source
    target = tmp_path / "t.bin"
    target.write_bytes(b"old")
    # Ctrl-C just after os.replace: the new file is in place, the save reports success.
    sys.settrace(_interrupt_at(atomic_write.__code__, "_fsync_directory(directory)"))
    try:
        atomic_write(target, lambda f: f.write(b"new"))
    finally:
        sys.settrace(None)
    assert target.read_bytes() == b"new" and sorted(os.listdir(tmp_path)) == ["t.bin"]
    # Ctrl-C just before os.replace: nothing happened, and the interrupt is reported.
    sys.settrace(_interrupt_at(atomic_write.__code__, "os.replace(tmp, target)", replace_line))
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic_write(target, lambda f: f.write(b"newer"))
    finally:
        sys.settrace(None)
    assert target.read_bytes() == b"new" and sorted(os.listdir(tmp_path)) == ["t.bin"]


def test_stale_temporaries_of_dead_processes_only_are_removed(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead_pid = int(dead.stdout)  # exited: its pid names no process (until reused, rare in a test)
    stale = tmp_path / f".m.jld2.txtmp{dead_pid}-0123456789ab.tmp"
    live = tmp_path / f".m.jld2.txtmp{os.getppid()}-0123456789ab.tmp"  # our parent: alive
    mine = tmp_path / f".m.jld2.txtmp{os.getpid()}-0123456789ab.tmp"  # this process: alive
    unrelated = tmp_path / f".m.jld2.{dead_pid}.tmp"  # not our naming: never touched
    for p in (stale, live, mine, unrelated):
        p.write_bytes(b"x")
    treexchange.save(tmp_path / "m.jld2", x=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["m.jld2", live.name, mine.name, unrelated.name]
    )


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_what_a_killed_save_leaves_is_removed_by_the_next_save(tmp_path: Path) -> None:
    target = tmp_path / "model.jld2"
    t0 = time.perf_counter()
    treexchange.save(tmp_path / "timing.jld2", x=np.full(N, 7, np.int64))
    one_save = time.perf_counter() - t0
    (tmp_path / "timing.jld2").unlink()
    leftovers_seen = 0
    for seed in range(6):
        rng = random.Random(100 + seed)
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(target), str(N), "named", "save"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.2, 1.5) * one_save)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left = [p.name for p in tmp_path.iterdir() if p.name != "model.jld2"]
        assert all(f"txtmp{proc.pid}-" in name for name in left), left
        leftovers_seen += bool(left)
        treexchange.save(target, x=np.arange(3))  # the next save to the same directory
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model.jld2"]
        assert list(treexchange.load(target, "x")) == [0, 1, 2]
    assert leftovers_seen > 0, "no kill landed in the middle of a write: the test proved nothing"


@pytest.mark.skipif(not atomic.UNNAMED_TEMPORARIES, reason="needs O_TMPFILE and /proc (Linux)")
def test_unnamed_temporary_is_invisible_until_the_rename(tmp_path: Path) -> None:
    target = tmp_path / "m.jld2"
    target.write_bytes(b"old")
    listed: list[list[str]] = []
    checked: list[bytes] = []

    def write(f: Any) -> None:
        f.write(b"new bytes")
        listed.append(sorted(os.listdir(tmp_path)))
        assert stat.S_IMODE(os.fstat(f.fileno()).st_mode) == 0o600

    def check(path: str) -> None:  # convert's read-back: a path that opens the unnamed file
        with open(path, "rb") as f:
            checked.append(f.read())
        listed.append(sorted(os.listdir(tmp_path)))

    atomic.atomic_write(target, write, check=check)
    assert listed == [["m.jld2"], ["m.jld2"]] and checked == [b"new bytes"]
    assert target.read_bytes() == b"new bytes" and sorted(os.listdir(tmp_path)) == ["m.jld2"]


@pytest.mark.skipif(not atomic.UNNAMED_TEMPORARIES, reason="needs O_TMPFILE and /proc (Linux)")
def test_refused_o_tmpfile_or_link_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    real_open, real_link = os.open, os.link

    def no_tmpfile(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "not supported by this file system")
        return real_open(path, flags, *args, **kwargs)

    def no_link(*args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EPERM, "linking refused")

    target = tmp_path / "m.jld2"
    treexchange.save(target, x=1)
    os.chmod(target, 0o640)
    # The file system refuses O_TMPFILE: a named temporary file, removed by the rename.
    monkeypatch.setattr(os, "open", no_tmpfile)
    treexchange.save(target, x=np.arange(5))
    monkeypatch.setattr(os, "open", real_open)
    assert list(treexchange.load(target, "x")) == [0, 1, 2, 3, 4]
    # Linking the unnamed file is refused: its bytes are copied to a named file at commit.
    monkeypatch.setattr(os, "link", no_link)
    treexchange.save(target, x=np.arange(6))
    monkeypatch.setattr(os, "link", real_link)
    assert list(treexchange.load(target, "x")) == [0, 1, 2, 3, 4, 5]
    assert sorted(os.listdir(tmp_path)) == ["m.jld2"]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
