"""Re-measure every table of docs/performance.md with one command.

    python benchmarks/run_all.py              # the sizes the tables were measured at (tens of minutes)
    python benchmarks/run_all.py --quick      # small sizes: checks every script runs (about 3 minutes)
    python benchmarks/run_all.py --only write,leaves

Each benchmark runs as its own process, one after another (never two at once, so they do not slow
each other), and its output goes to ``benchmarks/data/run-<time>/<name>.txt``; ``report.md`` there
lists, per benchmark, the command, the wall time, the load average before and after (other jobs on
the machine make figures incomparable: the report says how busy it was), and the output. Scripts
that take ``--json`` also leave their figures as JSON beside it. A benchmark that fails is reported
and the run goes on; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _common import machine

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Bench:
    """One script of this folder, with the arguments of the full and the quick measurement."""

    name: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    table: str  # the docs/performance.md section its output fills
    json: bool = False  # takes --json PATH


BENCHES = (
    Bench("import", "bench_import.py", (), ("--rounds", "3"), "Import"),
    Bench(
        "read", "bench_read.py", (), ("--size", "64MiB", "--leaves", "2000", "--repeat", "1"), "Read", True
    ),
    Bench(
        "write", "bench_write.py", (), ("--size", "64MiB", "--arrays", "20", "--repeat", "1"), "Write", True
    ),
    Bench(
        "write-interleaved",
        "bench_write.py",
        ("--interleaved", "5"),
        ("--interleaved", "1", "--size", "64MiB", "--arrays", "20"),
        "Write: side by side in one process",
    ),
    Bench(
        "write-c-512",
        "bench_write.py",
        ("--interleaved", "5", "--size", "512MiB"),
        ("--interleaved", "1", "--size", "64MiB", "--arrays", "20"),
        "Many small leaves, side by side: C-ordered save of 512 MiB",
    ),
    Bench(
        "cold-parallel",
        "bench_cold_parallel.py",
        ("--repeat", "5"),
        ("--size", "64MiB", "--repeat", "1"),
        "Parallel reads of a file that is not in the page cache",
    ),
    Bench("restore", "bench_restore.py", (), ("--size", "64MiB", "--repeat", "1"), "Restore"),
    Bench("schema", "bench_schema.py", (), ("--leaves", "2000", "--repeat", "1"), "Schema"),
    Bench(
        "leaves",
        "bench_leaves.py",
        (),
        ("--leaves", "1000,5000", "--repeat", "1", "--orbax-max", "1000"),
        "Many small leaves: save, load, walk",
        True,
    ),
    Bench(
        "leaves-interleaved",
        "bench_leaves.py",
        ("--interleaved", "3", "--cpu"),
        ("--interleaved", "1", "--cpu", "--leaves", "1000,5000"),
        "Many small leaves, side by side",
        True,
    ),
    Bench("safetensors", "bench_safetensors.py", (), ("--size", "64MiB"), "safetensors: a 2 GiB conversion"),
    Bench(
        "orbax", "bench_orbax.py", (), ("--size", "64MiB"), "orbax: 1 GiB, against orbax's own save/restore"
    ),
    Bench(
        "larger-than-ram",
        "bench_larger_than_ram.py",
        (),
        ("--size", "256MiB", "--cap", "128MiB"),
        "Larger than the memory it may use",
    ),
)


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # not Linux
        return "n/a"


def run(bench: Bench, quick: bool, out: Path) -> tuple[bool, str]:
    """Run one benchmark; returns (succeeded, its section of the report)."""
    args = list(bench.quick if quick else bench.full)
    if bench.json:
        args += ["--json", str(out / f"{bench.name}.json")]
    cmd = [sys.executable, str(HERE / bench.script), *args]
    before = _load()
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent, check=False)
    wall = time.perf_counter() - start
    text = proc.stdout + (f"\n[stderr]\n{proc.stderr}" if proc.returncode else "")
    (out / f"{bench.name}.txt").write_text(text, encoding="utf-8")
    shown = " ".join(["python", f"benchmarks/{bench.script}", *args])
    status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
    section = (
        f"## {bench.name}: {status}\n\n"
        f'Fills docs/performance.md, section "{bench.table}". `{shown}`; {wall:.1f} s; load average '
        f"{before} before, {_load()} after.\n\n```\n{text.strip()}\n```\n"
    )
    return proc.returncode == 0, section


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes: checks every script runs")
    ap.add_argument(
        "--only", default=None, help="comma-separated names: " + ",".join(b.name for b in BENCHES)
    )
    ap.add_argument("--out", default=None, help="output folder (default benchmarks/data/run-<time>)")
    args = ap.parse_args()
    chosen = BENCHES
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {b.name for b in BENCHES}
        if unknown:
            ap.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        chosen = tuple(b for b in BENCHES if b.name in names)
    out = Path(args.out) if args.out else HERE / "data" / time.strftime("run-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    info = machine()
    lines = [
        f"# Benchmarks, {'quick' if args.quick else 'full'} run of {time.strftime('%Y-%m-%d %H:%M')}\n",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".\n",
    ]
    failed = []
    for bench in chosen:
        print(f"[{time.strftime('%H:%M:%S')}] {bench.name} ...", flush=True)
        ok, section = run(bench, args.quick, out)
        print(f"    {'ok' if ok else 'FAILED'}", flush=True)
        lines.append(section)
        if not ok:
            failed.append(bench.name)
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    print(f"report: {out / 'report.md'}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
