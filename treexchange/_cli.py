"""The ``treexchange`` command line: one sub-command per module in ``treexchange._commands``."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

from ._errors import TreexchangeError
from ._version import __version__

# Each module defines ``add_parser(subparsers)``, which registers its sub-command and sets
# ``func`` (taking the parsed namespace, returning the exit code) as the parser default.
_COMMAND_MODULES = ("demo", "inspect", "convert", "schema", "validate", "diff")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="treexchange",
        description="Move model state between Julia (Flux/Lux, JLD2) and Python (JAX) without loss.",
    )
    parser.add_argument("--version", action="version", version=f"treexchange {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        module = importlib.import_module(f"treexchange._commands.{name}")
        module.add_parser(sub)
    return parser


def _quiet_orbax_leftovers() -> None:
    """Keep off stderr what orbax leaves behind when reading a damaged checkpoint fails: its other
    reads, still running, end after it has given up on them, so tensorstore reports their
    callbacks' "Event loop is closed" as unraisable and asyncio logs "Task exception was never
    retrieved", each a traceback after the one-line error. Kept for the rest of the process:
    they may come after the command has returned."""
    asyncio_log = logging.getLogger("asyncio")
    if _never_retrieved not in asyncio_log.filters:
        asyncio_log.addFilter(_never_retrieved)
    previous = sys.unraisablehook
    if getattr(previous, "_treexchange_quiet", False):
        return

    def hook(unraisable: Any) -> None:
        err = unraisable.exc_value
        if not (isinstance(err, RuntimeError) and str(err) == "Event loop is closed"):
            previous(unraisable)

    hook._treexchange_quiet = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def _never_retrieved(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Task exception was never retrieved")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 validation failed, 2 error)."""
    _quiet_orbax_leftovers()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        return 0
    except TreexchangeError as err:
        print(f"treexchange: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a missing or unreadable input file: a message, not a traceback
        print(f"treexchange: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
