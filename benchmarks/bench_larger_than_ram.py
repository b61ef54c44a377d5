"""Converting a model larger than the memory it may use: JLD2 -> safetensors -> JLD2 under a hard cap.

A machine with less RAM than the model is simulated with a Linux memory cgroup (v1 ``memory`` or v2
``memory.max``): each conversion runs in a fresh process placed in a cgroup whose limit (``--cap``,
default 1.5 GiB) is a fraction of the file (``--size``, default 6 GiB). The cap counts everything the
process makes resident, page cache of the mapped files included; the kernel reclaims clean file pages
at the cap and kills the process (OOM) if anonymous memory alone would pass it. So a conversion that
finishes proves it never held more than the cap of data, whatever its page-cache footprint.

``RLIMIT_AS`` is not used: it counts address space, so it refuses the memory *map* of a file larger
than the cap even though mapped pages are never all resident; a cgroup limits what is resident.

Steps, each in its own capped process:

* ``jld2 -> safetensors`` and ``safetensors -> jld2``: ``treexchange convert`` (the CLI's body);
* ``verify``: every layer of the round-tripped file equals the original (all arrays compared,
  one layer at a time, through ``treexchange.load``'s memory-mapped arrays).

Reported per step: wall time, the process's peak RSS (``VmHWM``: resident file pages included), the
cgroup's peak charge, and how often the cgroup hit its limit (``failcnt``: > 0 shows the cap bit).
Needs permission to create a cgroup (root in a container); otherwise it says so and exits 2.

Usage: ``python benchmarks/bench_larger_than_ram.py [--size 6GiB] [--cap 1.5GiB] [--layers 24]``
(``--size 512MiB --cap 128MiB`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine, markdown_table, parse_size

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


class Cgroup:
    """A memory cgroup with a hard limit, removed on exit."""

    def __init__(self, limit: int) -> None:
        name = f"treexchange-bench-{os.getpid()}"
        if (V1 / "memory.limit_in_bytes").exists():
            self.path, self.v1 = V1 / name, True
        elif (V2 / "cgroup.controllers").exists():
            self.path, self.v1 = V2 / name, False
        else:
            raise PermissionError("no memory cgroup hierarchy under /sys/fs/cgroup")
        self.path.mkdir()
        (self.path / ("memory.limit_in_bytes" if self.v1 else "memory.max")).write_text(str(limit))
        if not self.v1:
            (self.path / "memory.swap.max").write_text("0")

    def reset(self) -> None:
        if self.v1:
            (self.path / "memory.max_usage_in_bytes").write_text("0")
            (self.path / "memory.failcnt").write_text("0")

    def stats(self) -> dict[str, float]:
        if self.v1:
            peak = int((self.path / "memory.max_usage_in_bytes").read_text())
            hits = int((self.path / "memory.failcnt").read_text())
        else:
            peak_file = self.path / "memory.peak"
            peak = int(peak_file.read_text()) if peak_file.exists() else -1
            events = dict(line.split() for line in (self.path / "memory.events").read_text().splitlines())
            hits = int(events.get("max", 0))
        return {"cgroup_peak_mib": peak / (1 << 20), "limit_hits": hits}

    def enter(self) -> None:
        """Run in the child between fork and exec: the child, and only it, is capped."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def child(step: str, src: str, dst: str) -> None:
    t0 = time.perf_counter()
    if step == "verify":
        import numpy as np

        import treexchange as tx

        a, b = tx.load(src, "model_state"), tx.load(dst, "model_state")
        assert len(a.layers) == len(b.layers)
        for x, y in zip(a.layers, b.layers):
            assert np.array_equal(x.weight, y.weight) and np.array_equal(x.bias, y.bias)
    else:
        from treexchange._interop._convert import convert_formats

        convert_formats(src, dst)
    wall = time.perf_counter() - t0
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    print(json.dumps({"step": step, "seconds": wall, "vmhwm_mib": hwm / 1024}))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="6GiB")
    ap.add_argument("--cap", default="1.5GiB")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child", nargs=3, metavar=("STEP", "SRC", "DST"))
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    cap = parse_size(args.cap)
    try:
        group = Cgroup(cap)
    except OSError as exc:
        print(f"cannot create a memory cgroup here ({exc}); this benchmark needs one", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-larger-than-ram-"))
    try:
        from bench_safetensors import build

        jld2, st, back = work / "model.jld2", work / "model.safetensors", work / "back.jld2"
        build(jld2, parse_size(args.size), args.layers)
        size_mib = jld2.stat().st_size / (1 << 20)
        rows = []
        steps = (("jld2 -> safetensors", jld2, st), ("safetensors -> jld2", st, back), ("verify", jld2, back))
        for step, src, dst in steps:
            os.sync()
            # Start each step with none of its files in the page cache, as on a machine where they
            # could not all fit.
            subprocess.run(
                ["sh", "-c", "echo 1 > /proc/sys/vm/drop_caches"], check=False, capture_output=True
            )
            group.reset()
            proc = subprocess.run(
                [sys.executable, __file__, "--child", step, str(src), str(dst)],
                capture_output=True,
                text=True,
                preexec_fn=group.enter,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{step} failed under the {args.cap} cap:\n{proc.stderr[-3000:]}")
            r = {**json.loads(proc.stdout.strip().splitlines()[-1]), **group.stats()}
            rows.append(
                [
                    step,
                    f"{r['seconds']:.1f}",
                    f"{size_mib / r['seconds']:.0f}",
                    f"{r['vmhwm_mib']:.0f}",
                    f"{r['cgroup_peak_mib']:.0f}",
                    r["limit_hits"],
                ]
            )
        print(json.dumps(machine()))
        print(f"file: {size_mib:.0f} MiB in {args.layers} layers; memory cap {cap / (1 << 20):.0f} MiB")
        headers = ["step", "seconds", "MiB/s", "peak RSS (MiB)", "cgroup peak (MiB)", "times at the cap"]
        print(markdown_table(headers, rows))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
        group.remove()


if __name__ == "__main__":
    sys.exit(main())
