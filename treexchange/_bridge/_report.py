"""What a restore did, by path: :class:`RestoreReport`, and which missing entries were allowed.

A restore that does not fill every template leaf from the file, or leaves file data unused, says
so: ``restore(..., report=True)`` returns the report next to the tree; without it such a restore
emits one :class:`RestoreWarning` carrying the same text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from .._errors import Mismatch, MismatchError, PathSegment, TreePath, format_path

PathSpec = str | Sequence[PathSegment]
MissingSpec = bool | Collection[PathSpec] | Callable[[TreePath], bool] | None


class RestoreWarning(UserWarning):
    """A restore kept template values or ignored file data (``allow_missing=True``, ``allow_extra``,
    ``strict=False``) and the caller did not ask for the :class:`RestoreReport` (``report=True``)."""


@dataclasses.dataclass(frozen=True)
class RestoreReport:
    """What :func:`treexchange.restore` did, leaf by leaf, by tree path (``inspect`` convention:
    the first segment is the loaded name, tuple positions are 1-based, as in mismatch paths).

    Attributes:
        restored: template leaves (arrays, numbers, strings) whose value came from the file.
        kept: template leaves that kept the template's value (absent from the file, ``allow_missing``).
        ignored: file entries holding data that the template has no place for (``allow_extra``).
        converted: ``(path, file dtype, result dtype)`` for leaves converted by ``cast`` (every
            value checked unless ``cast="round"`` / ``"unsafe"`` allowed changes).

    Example:
        >>> import numpy as np, treexchange as tx
        >>> state = tx.NamedTuple(w=np.ones(2, np.float32), extra=np.zeros(1, np.float32))
        >>> like = {"w": np.zeros(2, np.float32), "head": np.zeros(3, np.float32)}
        >>> out, report = tx.restore(state, like, allow_missing=["head"], allow_extra=True,
        ...                          report=True, path=["m"])
        >>> report.restored, report.kept, report.ignored
        ((('m', 'w'),), (('m', 'head'),), (('m', 'extra'),))
        >>> print(report)
        restored 1 of 2 template leaves from the file, kept 1, ignored 1 file entry
          kept (template value): m.head
          ignored (file data unused): m.extra
    """

    restored: tuple[TreePath, ...] = ()
    kept: tuple[TreePath, ...] = ()
    ignored: tuple[TreePath, ...] = ()
    converted: tuple[tuple[TreePath, str, str], ...] = ()

    @property
    def complete(self) -> bool:
        """Every template leaf came from the file and every file entry was used."""
        return not self.kept and not self.ignored

    def __str__(self) -> str:
        total = len(self.restored) + len(self.kept)
        head = f"restored {len(self.restored)} of {total} template leaves from the file"
        if self.kept:
            head += f", kept {len(self.kept)}"
        if self.ignored:
            n = len(self.ignored)
            head += f", ignored {n} file entr{'ies' if n != 1 else 'y'}"
        lines = [head]
        if self.kept:
            lines.append(f"  kept (template value): {_paths(self.kept)}")
        if self.ignored:
            lines.append(f"  ignored (file data unused): {_paths(self.ignored)}")
        if self.converted:
            conv = ", ".join(f"{format_path(p)} {a} -> {b}" for p, a, b in self.converted[:_SHOWN])
            more = f", ... ({len(self.converted) - _SHOWN} more)" if len(self.converted) > _SHOWN else ""
            lines.append(f"  converted: {conv}{more}")
        return "\n".join(lines)


_SHOWN = 20  # paths printed per list; the report's tuples hold them all


def _paths(paths: tuple[TreePath, ...]) -> str:
    text = ", ".join(format_path(p) for p in paths[:_SHOWN])
    return text + (f", ... ({len(paths) - _SHOWN} more)" if len(paths) > _SHOWN else "")


class ReportLog:
    """Collects the report during the checking pass (paths in visit order)."""

    def __init__(self) -> None:
        self.restored: list[TreePath] = []
        self.kept: list[TreePath] = []
        self.ignored: list[TreePath] = []
        self.converted: list[tuple[TreePath, str, str]] = []
        self.arrays_restored = 0
        self.arrays_kept = 0

    def restore(self, path: TreePath, *, array: bool) -> None:
        self.restored.append(path)
        self.arrays_restored += array

    def keep(self, path: TreePath, *, array: bool) -> None:
        self.kept.append(path)
        self.arrays_kept += array

    def nothing_restored(self) -> bool:
        """Template state was there to fill, and none of it came from the file."""
        if self.arrays_kept:
            return self.arrays_restored == 0
        return bool(self.kept) and not self.restored

    def freeze(self) -> RestoreReport:
        return RestoreReport(
            tuple(self.restored), tuple(self.kept), tuple(self.ignored), tuple(self.converted)
        )


class MissingRule:
    """Which template leaves may be absent from the file (``allow_missing=``).

    ``True`` allows any (but a restore that fills nothing from the file is still refused); a
    collection of paths allows those leaves and everything below them; a callable is asked with
    each leaf's path. Paths are tuples (``("head", "weight")``, 1-based ints for positions) or
    their text (``"head.weight"``, ``"layers[2]"``), relative to the template, or with the loaded
    name in front (``"model_state.head"``).
    """

    def __init__(self, spec: MissingSpec, root: TreePath) -> None:
        self.root = root
        self.bare = spec is True
        self.any = bool(spec)
        self._predicate: Callable[[TreePath], bool] | None = None
        self._names: set[Any] = set()
        if callable(spec):
            self._predicate = spec
            self.any = True
        elif isinstance(spec, str):
            self._names = {spec}
        elif spec not in (None, True, False):
            if not isinstance(spec, Collection):
                raise TypeError(
                    "allow_missing must be a bool, a collection of paths or a predicate, "
                    f"not {type(spec).__name__}"
                )
            self._names = {p if isinstance(p, str) else tuple(p) for p in spec}

    def permits(self, path: TreePath) -> bool:
        if self.bare:
            return True
        relative = path[len(self.root) :] if path[: len(self.root)] == self.root else path
        if self._predicate is not None:
            return bool(self._predicate(relative))
        for whole in (relative, path):
            for n in range(1, len(whole) + 1):
                prefix = whole[:n]
                if prefix in self._names or format_path(prefix) in self._names:
                    return True
        return False


# The fixes an error message names, by key, in this order (the walker picks the keys that apply).
_FIXES = {
    "x64": 'jax.config.update("jax_enable_x64", True) at startup: jax then holds 64-bit values as they are',
    "numpy": "numpy=True: numpy arrays hold every dtype",
    "cast": "cast=True converts dtypes when every value converts exactly (checked on the values)",
    "round": 'cast="round" narrows floats on purpose: rounded to the nearest value of the dtype they '
    "go to (overflow to inf, underflow to 0 and integers out of range are still refused)",
    "unsafe": 'cast="unsafe" converts whatever happens to the values (wrap-around, inf, 0, truncation)',
    "names": "check that the template uses the file's names (unused file data is listed below)",
    "allow": "allow_missing=[paths] or allow_missing=lambda path: ... keeps exactly those template values",
}


def fixes_for_conversion(dest: np.dtype, mode: str, *, x64: bool) -> set[str]:
    """The fixes worth naming when an array cannot become ``dest`` as it is (``mode`` = cast mode)."""
    keys = {"x64", "numpy"} if x64 else set()
    floating = dest.kind in "fc" or dest.name == "bfloat16"
    if mode == "none":
        keys.add("round" if floating else "cast")
    elif mode == "exact" and floating:
        keys.add("round")
    if mode != "unsafe":
        keys.add("unsafe")
    return keys


def restore_error(
    mismatches: list[Mismatch], header: str, hints: set[str], ignored: Sequence[TreePath]
) -> MismatchError:
    """One MismatchError listing every problem, followed by the fixes that apply and, when template
    entries were missing, the file data that had no place in the template (often the same
    weights under other names)."""
    err = MismatchError(mismatches, header=header)
    extra: list[str] = []
    fixes = [text for key, text in _FIXES.items() if key in hints]
    if fixes:
        extra.append("fixes:")
        extra.extend(f"  - {fix}" for fix in fixes)
    if ignored and any(m.kind == "missing" for m in mismatches):
        extra.append(f"file data the template has no place for: {_paths(tuple(ignored))}")
    if extra:
        err.message = "\n".join([err.message, *extra])
        err.args = (err.message,)
    return err
