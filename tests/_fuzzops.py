"""One fuzzed operation at a time, under a CPU-time alarm: what the port and safetensors fuzzes
(``tests/test_fuzz_port.py``, ``tests/test_fuzz_safetensors.py``) share. An operation gives a
result or a TreexchangeError; any other exception, or running past the alarm (a hang), is a
failure collected with its description; ``check()`` asserts there were none."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from test_fuzz_read import _alarm, _Timeout

import treexchange as tx


class FuzzOps:
    """``with FuzzOps(limit) as ops: ops.run(op, desc, call, *args) ...; outcomes = ops.check()``."""

    def __init__(self, time_limit: float) -> None:
        self.time_limit = time_limit
        self.outcomes = {"ok": 0, "error": 0}
        self.failures: list[str] = []
        self._old: object = None

    def __enter__(self) -> FuzzOps:
        self._old = signal.signal(signal.SIGPROF, _alarm)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        signal.signal(signal.SIGPROF, self._old)  # type: ignore[arg-type]

    def run(
        self,
        op: str,
        desc: str,
        call: Callable[..., Any],
        *args: Any,
        after: Path | None = None,
        **kwargs: Any,
    ) -> None:
        """``call(*args, **kwargs)`` under the alarm: a result unless it returns False (a CLI's
        refusal by exit code); ``after``: an output file removed once it ends either way."""
        signal.setitimer(signal.ITIMER_PROF, self.time_limit)  # CPU time: a loaded machine is no hang
        try:
            self.outcomes["error" if call(*args, **kwargs) is False else "ok"] += 1
        except tx.TreexchangeError as err:
            if isinstance(err.__cause__, _Timeout):  # (the alarm, wrapped at a library's boundary)
                self.failures.append(f"{op} hung: {desc}")
            else:
                self.outcomes["error"] += 1
        except _Timeout:
            self.failures.append(f"{op} hung: {desc}")
        except Exception as err:  # (what the fuzz is for)
            self.failures.append(f"{op} {type(err).__name__}: {err}: {desc}")
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            if after is not None:
                after.unlink(missing_ok=True)

    def check(self) -> dict[str, int]:
        assert not self.failures, "\n".join(self.failures[:20])
        return self.outcomes


def json_places(doc: Any) -> list[tuple[Any, Any]]:
    """``(parent, key)`` of every node of a JSON document but its root, in document order (pre-order):
    the places a fuzz replaces or removes a node at."""
    places: list[tuple[Any, Any]] = []
    todo: list[tuple[Any, Any, Any]] = [(doc, None, None)]
    while todo:  # (a loop: fuzzed documents may nest deep)
        x, parent, key = todo.pop()
        if parent is not None:
            places.append((parent, key))
        children = (
            list(x.items()) if isinstance(x, dict) else list(enumerate(x)) if isinstance(x, list) else []
        )
        todo.extend((v, x, k) for k, v in reversed(children))
    return places
