"""The package version and the producer note it writes into JLD2 files (lowest layer: every layer
that writes a file or records provenance reads it from here)."""

from __future__ import annotations

__version__ = "0.1.0"


def default_producer() -> str:
    """The producer note written after JLD2's format string.

    Example:
        >>> from treexchange._version import default_producer
        >>> default_producer()
        ' (treexchange 0.1.0 64-bit LE)'
    """
    return f" (treexchange {__version__} 64-bit LE)"
