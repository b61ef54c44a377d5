"""`treexchange diff` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("diff", help="(not available yet)")
    p.set_defaults(func=lambda args: _unavailable())


def _unavailable() -> int:
    print("treexchange diff: not available in this version yet")
    return 2
