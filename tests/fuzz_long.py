"""The long fuzz run, outside CI: the mutations of tests/test_fuzz_read.py on every fixture, every
hostile file and files treexchange writes, and those of tests/_bson_fuzz.py on the BSON.jl files,
many cases.

Usage (from the repository, with ``PYTHONPATH`` set to it)::

    nice python tests/fuzz_long.py [--cases 50000] [--seed 1] [--report fuzz_long.json]

Every case is read completely (eager ``load``, the ``inspect --json`` and text listings) under a
10 s alarm (a hang) with tracemalloc measuring its peak allocation. Counted: cases, successes,
TreexchangeErrors, other exceptions (must be 0), hangs (must be 0), slow cases (> 2 s), and the
peak allocation per case (largest, and the largest relative to the file size). A case slow or
hung under tracemalloc is timed again without it (``test_fuzz_read.untraced_seconds``: the tracer
costs a deep tree's depth per allocation) and judged by that time; ``slow_traced_only`` counts
those slow only under the tracer. Failures are written to the report with the seed name and
mutation, so each can be replayed.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_fuzz_read as fz
from _bson_fuzz import BsonSeed, bson_seeds
from conftest import FIXTURES

import treexchange as tx

TIME_LIMIT = 10.0
SLOW = 2.0


def written_seeds() -> list[tuple[str, bytes]]:
    """Files treexchange writes: nested containers, shared arrays, compression, strings, Dicts."""
    out = []
    tied = np.arange(6, dtype=np.float32).reshape(2, 3)
    values = {
        "nested": tx.NamedTuple(
            layers=(
                tx.NamedTuple(weight=tied, bias=np.zeros(2, np.float32), σ=()),
                tx.NamedTuple(weight=tied),
            ),
            step=np.int64(3),
            name="model",
        ),
        "lists": [np.ones(3), [np.zeros(2), "a", tx.Symbol("b")], None, (1, 2.5)],
        "dict": {"a": np.arange(4), "b": {"c": np.float64(1.5)}},
    }
    with tempfile.TemporaryDirectory() as d:
        for name, value in values.items():
            for compress in (False, "deflate", "zstd"):
                path = Path(d, f"{name}_{compress}.jld2")
                try:
                    tx.save(path, x=value, compress=compress)
                except tx.TreexchangeError:
                    continue
                out.append((f"written/{name}_{compress}", path.read_bytes()))
    return out


def fixture_seeds() -> list[tuple[str, bytes]]:
    """Every Julia-written fixture of at most 256 KB (larger ones make each case slower, not harder)."""
    if not FIXTURES.is_dir():
        return []
    seeds = []
    for p in sorted(FIXTURES.rglob("*.jld2")):
        if p.stat().st_size <= 256 << 10:
            seeds.append((str(p.relative_to(FIXTURES)), p.read_bytes()))
    return seeds


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--report", default="fuzz_long.json")
    args = ap.parse_args()

    raw_seeds = fixture_seeds() + fz._hostile_seeds() + written_seeds() + fz._seeds()[:1]
    seeds: list[fz._Seed | BsonSeed] = []
    for name, raw in raw_seeds:
        try:
            seeds.append(fz._Seed(name, raw))
        except tx.TreexchangeError:
            pass  # a seed we cannot even parse for pointers: its bytes are still fuzzed by others
    seeds += [BsonSeed(name, raw) for name, raw in bson_seeds()]  # BSON.jl files, their own mutations
    rng = random.Random(args.seed)
    counts = {
        "cases": 0,
        "ok": 0,
        "treexchange_error": 0,
        "other_exception": 0,
        "hang": 0,
        "slow": 0,
        "slow_traced_only": 0,
    }
    failures: list[str] = []
    slow: list[str] = []
    peak_max = (0, "")
    ratio_max = (0.0, "")
    old = signal.signal(signal.SIGPROF, _alarm)
    tracemalloc.start()
    started = time.time()
    try:
        for i in range(args.cases):
            seed = seeds[i % len(seeds)]
            desc, raw = seed.mutate(rng)
            desc = f"case {i}: {seed.name}: {desc}"
            tracemalloc.reset_peak()
            timed_out = False
            signal.setitimer(signal.ITIMER_PROF, TIME_LIMIT)  # CPU time: a loaded machine is no hang
            t0 = time.process_time()  # CPU seconds: other processes do not make a case slow
            try:
                fz._read_everything(raw)
                counts["ok"] += 1
            except tx.TreexchangeError:
                counts["treexchange_error"] += 1
            except _Timeout:
                timed_out = True
            except Exception as err:
                counts["other_exception"] += 1
                failures.append(f"{desc}: {type(err).__name__}: {str(err)[:300]}")
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            elapsed = time.process_time() - t0
            counts["cases"] += 1
            peak = tracemalloc.get_traced_memory()[1]
            if peak > peak_max[0]:
                peak_max = (peak, desc)
            ratio = peak / max(len(raw), 1)
            if ratio > ratio_max[0]:
                ratio_max = (ratio, f"{desc} ({peak} bytes for {len(raw)})")
            if timed_out or elapsed > SLOW:
                # judged without the tracer, which costs a deep tree's depth per allocation
                untraced = fz.untraced_seconds(raw)
                traced = f"over {TIME_LIMIT:.0f}" if timed_out else f"{elapsed:.1f}"
                if untraced is None:
                    counts["hang"] += 1
                    failures.append(f"{desc}: hang")
                elif untraced > SLOW:
                    counts["slow"] += 1
                    slow.append(f"{desc}: {untraced:.1f} s ({traced} s traced)")
                else:
                    counts["slow_traced_only"] += 1
                    slow.append(f"{desc}: {untraced:.2f} s, {traced} s only under tracemalloc")
            if i % 1000 == 999:
                print(f"{i + 1} cases, {counts}, {time.time() - started:.0f} s", flush=True)
                _write(args.report, seeds, counts, started, peak_max, ratio_max, failures, slow)
    finally:
        tracemalloc.stop()
        signal.signal(signal.SIGPROF, old)
    report = _write(args.report, seeds, counts, started, peak_max, ratio_max, failures, slow)
    print(json.dumps({k: v for k, v in report.items() if k not in ("failures", "slow")}, ensure_ascii=False))
    return 1 if failures else 0


def _write(
    path: str,
    seeds: list,
    counts: dict[str, int],
    started: float,
    peak_max: tuple[int, str],
    ratio_max: tuple[float, str],
    failures: list[str],
    slow: list[str],
) -> dict:
    """Write the report (also every 1000 cases, so a long run stopped early still has one)."""
    report = {
        "seeds": len(seeds),
        "counts": counts,
        "seconds": round(time.time() - started, 1),
        "peak_alloc_bytes_max": peak_max,
        "peak_alloc_per_file_byte_max": ratio_max,
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "failures": failures,
        "slow": slow[:200],
    }
    Path(path).write_text(json.dumps(report, indent=1, ensure_ascii=False))
    return report


if __name__ == "__main__":
    sys.exit(main())
