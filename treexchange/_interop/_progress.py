"""A one-line progress bar on stderr, shown only when stderr is a terminal.

(``rich`` and ``tqdm`` are not dependencies of treexchange; this is all a conversion needs.)
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressLine:
    """Counts bytes done out of ``total`` and redraws ``label  42% 1.2/2.9 GiB`` at most 10 times
    a second; silent when ``stream`` is not a TTY (piped, or a log file).

    Example:
        >>> import io
        >>> bar = ProgressLine(100, "convert", stream=io.StringIO())
        >>> bar.enabled
        False
        >>> bar(60); bar.done, bar.close()
        (60, None)
    """

    def __init__(self, total: int, label: str, *, stream: TextIO | None = None) -> None:
        self.total = max(int(total), 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.done = 0
        self._last = 0.0

    def __call__(self, nbytes: int) -> None:
        self.done += nbytes
        now = time.monotonic()
        if self.enabled and (now - self._last >= 0.1 or self.done >= self.total):
            self._last = now
            self._draw()

    def _draw(self) -> None:
        # (A writer's count may pass the total: it includes the metadata written with the data.)
        done = min(self.done, self.total)
        frac = done / self.total if self.total else 1.0
        width = 30
        filled = int(width * frac)
        bar = "#" * filled + "-" * (width - filled)
        gib = 1 << 30
        self.stream.write(f"\r{self.label} [{bar}] {frac:4.0%} {done / gib:.2f}/{self.total / gib:.2f} GiB")
        self.stream.flush()

    def close(self) -> None:
        """End the line (when one was drawn)."""
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
