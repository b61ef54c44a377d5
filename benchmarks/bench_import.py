"""What ``import treexchange`` costs, against ``import numpy`` (figure for docs/performance.md).

Each measurement is a fresh interpreter that times one import statement with ``time.process_time``
(CPU time of that process, interpreter start-up excluded). The statements are run interleaved,
round after round, so a busy machine slows them alike; each figure is the best of ``--rounds``
(default 15). Also timed: what a reader loads (``treexchange.open``, ``treexchange.load``), the first
use of the writer (``treexchange.save``) and of the JAX bridge (``treexchange.restore``), for reference.

Usage: ``python benchmarks/bench_import.py [--rounds 15]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys

STATEMENTS = {
    "numpy": "import numpy",
    "treexchange": "import treexchange",
    "treexchange + open": "import treexchange; treexchange.open",
    "treexchange + load": "import treexchange; treexchange.load",
    "treexchange + save": "import treexchange; treexchange.save",
    "treexchange + restore": "import treexchange; treexchange.restore",
}

_TIMER = "import time; t = time.process_time(); {stmt}; print(time.process_time() - t)"


def cpu_seconds(statement: str) -> float:
    """CPU seconds a fresh interpreter spends running ``statement``."""
    done = subprocess.run(
        [sys.executable, "-c", _TIMER.format(stmt=statement)], capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip())


def measure(rounds: int) -> dict[str, float]:
    """Best CPU time of each statement over ``rounds`` interleaved rounds."""
    best = dict.fromkeys(STATEMENTS, float("inf"))
    for _ in range(rounds):
        for label, statement in STATEMENTS.items():
            best[label] = min(best[label], cpu_seconds(statement))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    best = measure(args.rounds)
    numpy_time = best["numpy"]
    for label, seconds in best.items():
        print(f"{label:24} {seconds * 1000:7.1f} ms CPU  {seconds / numpy_time:5.2f}x import numpy")


if __name__ == "__main__":
    main()
