"""`treexchange inspect` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("inspect", help="(not available yet)")
    p.set_defaults(func=lambda args: _unavailable())


def _unavailable() -> int:
    print("treexchange inspect: not available in this version yet")
    return 2
