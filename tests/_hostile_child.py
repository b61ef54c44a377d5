"""Child process for tests/test_hostile.py and tests/fuzz_long.py: one entry point on one file.

``python tests/_hostile_child.py ENTRY[,ENTRY...] FILE`` runs each ENTRY (``walk``, ``load_mmap``,
``load_nommap``, ``infer``, ``validate``, ``inspect``, ``inspect_json``, ``convert``,
``convert_safetensors``) on FILE in
turn and prints one JSON line per entry: ``outcome`` (``ok`` or the exception class),
``treexchange`` (the exception is a TreexchangeError, or there was none), ``message``, the error's
``offset`` and ``path``, ``seconds`` and ``maxrss_kb`` (this process's peak resident set so far,
from ``resource.getrusage``) plus ``baseline_kb`` (the peak after imports).

``python tests/_hostile_child.py --serve`` imports all that once (and runs every entry on a small
file of its own, for the imports the entry points make when first called), then reads lines
``ENTRY[,ENTRY...]<tab>FILE`` from stdin and forks a child for each, which prints the same lines;
after each child it prints ``{"done": STATUS, "stderr": ...}`` (the exit status, negative for a
signal, and the end of what the child wrote to stderr). A forked child's time and peak resident
set are its own as a new process's are (Linux starts a child's peak at its size when forked), and
it starts in a second's less: test_hostile.py runs its files through one server per worker.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import tempfile
import time
from typing import Any

import numpy as np

import treexchange as tx
from treexchange._inspect import json_lines, text_lines
from treexchange._interop import convert_formats
from treexchange._save import convert


def _walk(node: Any) -> None:
    """Open + full lazy walk reading every array (iteratively: a deep file must not need a deep stack)."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        address = n.object_address
        if address is not None:
            if address in seen:
                continue  # each object once: a shared object, or a cycle back to an ancestor
            seen.add(address)
        if isinstance(n, tx.Group):
            stack.extend(n[k] for k in n)
        elif n.kind == "array":
            np.asarray(n)
        elif hasattr(n, "children"):
            stack.extend(child for _seg, child in n.children())
        else:
            n.read()


def _inspect(path: str, as_json: bool) -> None:
    """What ``treexchange inspect FILE [--json]`` does, with its exceptions left to propagate."""
    with tx.open(path) as f, contextlib.redirect_stdout(io.StringIO()) as out:
        for line in json_lines(f) if as_json else text_lines(f):
            out.write(line + "\n")


def run(entry: str, path: str) -> None:
    if entry == "walk":
        with tx.open(path) as f:
            _walk(f)
    elif entry == "load_mmap":
        tx.load(path, mmap=True)
    elif entry == "load_nommap":
        tx.load(path, mmap=False)
    elif entry == "infer":
        tx.infer_schema(path)
    elif entry == "validate":
        try:
            doc = tx.infer_schema(path)
        except tx.TreexchangeError:
            doc = tx.infer_schema({"x": np.zeros(1)})
        tx.validate(path, doc)
    elif entry == "inspect":
        _inspect(path, False)
    elif entry == "inspect_json":
        _inspect(path, True)
    elif entry == "convert":
        with tempfile.TemporaryDirectory() as d:
            convert(path, os.path.join(d, "out.jld2"))
    elif entry == "convert_safetensors":  # (the lazy walk of the tree formats' route)
        with tempfile.TemporaryDirectory() as d:
            convert_formats(path, os.path.join(d, "out.safetensors"), to="safetensors")
    else:
        raise SystemExit(f"unknown entry {entry}")


def main() -> None:
    if sys.argv[1] == "--serve":
        serve()
    else:
        report(sys.argv[1].split(","), sys.argv[2])


def report(entries: list[str], path: str) -> None:
    """Run each entry on ``path`` and print its JSON line (the protocol above)."""
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for entry in entries:
        t0 = time.perf_counter()
        outcome, is_tx, message, offset, where = "ok", True, "", None, None
        try:
            run(entry, path)
        except BaseException as err:
            outcome, is_tx, message = type(err).__name__, isinstance(err, tx.TreexchangeError), str(err)[:500]
            offset, where = getattr(err, "offset", None), list(map(str, getattr(err, "path", ()) or ()))
        seconds = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        record = {
            "entry": entry,
            "outcome": outcome,
            "treexchange": is_tx,
            "message": message,
            "offset": offset,
            "path": where,
            "seconds": seconds,
            "maxrss_kb": rss,
            "baseline_kb": baseline,
        }
        print(json.dumps(record), flush=True)


def serve() -> None:
    """The ``--serve`` loop (the protocol above)."""
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
        warm = os.path.join(d, "warm.jld2")
        tx.save(warm, model_state=tx.NamedTuple(layers=(tx.NamedTuple(weight=np.ones((2, 3), np.float32)),)))
        report(["walk", "load_mmap", "load_nommap", "infer", "validate", "inspect", "inspect_json",
                "convert", "convert_safetensors"], warm)  # fmt: skip
    for line in sys.stdin:
        entries, path = line.rstrip("\n").split("\t")
        with tempfile.TemporaryFile() as err:
            pid = os.fork()
            if pid == 0:  # the child: its stderr to the file, its lines to the server's stdout
                code = 1
                try:
                    os.dup2(err.fileno(), 2)
                    report(entries.split(","), path)
                    code = 0
                finally:
                    sys.stdout.flush()
                    os._exit(code)
            status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            err.seek(0)
            tail = err.read()[-3000:].decode(errors="replace")
        print(json.dumps({"done": status, "stderr": tail}), flush=True)


if __name__ == "__main__":
    main()
