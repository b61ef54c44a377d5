"""`treexchange schema` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("schema", help="(not available yet)")
    p.set_defaults(func=lambda args: _unavailable())


def _unavailable() -> int:
    print("treexchange schema: not available in this version yet")
    return 2
