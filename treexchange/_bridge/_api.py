"""``restore``: Julia state (value-model values) -> the template's PyTree, holding the template's
kind of arrays (numpy or jax)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import Mismatch, MismatchError, PathSegment
from .._values import JuliaStruct, NamedTuple
from ._classify import is_array_template
from ._exact import conversion_loss
from ._place import KeyPath, Placer
from ._report import MissingSpec, ReportLog, RestoreWarning, fixes_for_conversion, restore_error
from ._restore import LeafRef, Options, _dict_key, _segment, _seq_key, check_and_build


def restore(
    values: Any,
    like: Any = None,
    *,
    strict: bool = True,
    allow_missing: MissingSpec = False,
    allow_extra: bool = False,
    cast: bool | str = False,
    sharding: Any = None,
    numpy: bool = False,
    layout: Callable[[Any], Any] | None = None,
    path: Sequence[PathSegment] = (),
    report: bool = False,
) -> Any:
    """Put Julia state into the structure of a template PyTree (an Equinox model, dicts, ...).

    The result has the template's structure and node types (Equinox modules rebuilt, static fields
    and functions taken from the template). Each array leaf is the kind the template holds there:
    a numpy array for a numpy leaf, a jax array for a ``jax.Array`` (on its device) or a
    ``jax.ShapeDtypeStruct`` (with its ``.sharding``); ``numpy=True`` gives numpy everywhere,
    ``sharding=`` jax arrays placed that way. No value is ever changed without being asked for:
    64-bit data going into jax while ``jax_enable_x64`` is off, or a ``cast`` that would change a
    value, is reported like any other mismatch, with the fixes in the message. Everything is
    checked before any array is placed; all problems are reported together in one
    :class:`~treexchange.MismatchError`, each :class:`~treexchange.Mismatch` with its path
    (``model_state.layers[2].weight: shape (5, 16) in file, (5, 32) in template``).

    Args:
        values: Julia state as :func:`treexchange.load` returns it (NamedTuples, tuples, numpy arrays).
        like: the template. ``None`` converts ``values`` as they are (arrays -> jax arrays, order kept).
        strict: by default every template entry must be in the file, nothing extra, fields in the
            same order, dtypes equal. ``strict=False`` ignores field order and extra file entries
            and converts dtypes (``cast=True`` unless ``cast`` is given); shapes and kinds must
            still fit, and every template leaf must still be in the file (see ``allow_missing``).
        allow_missing: template leaves absent from the file keep the template's value: a collection
            of paths (``["head", ("layers", 3, "bias")]``; text as in error messages, relative to the
            template; a path covers everything below it), a predicate called with each leaf's path
            tuple, or ``True`` for any (but a restore that fills nothing from the file is refused).
        allow_extra: entries of the file that the template lacks are ignored.
        cast: convert arrays and numbers to the template's dtype. ``True`` (``"exact"``) only when
            every value converts exactly (checked on the values: ``2**40`` does not fit ``int32``,
            ``0.1`` does not fit ``float32``); ``"round"`` lets floats round to the nearest value
            (overflow to inf, underflow to 0 and integers out of range are still refused);
            ``"unsafe"`` converts whatever happens to the values.
        sharding: a ``jax.sharding.Sharding`` for every array, or a PyTree of them (``None`` = default
            device) that is a prefix of the template; each device reads only its own slice.
        numpy: return numpy arrays (zero-copy views of the file where possible) for every leaf.
        layout: a function mapping the template to the shape of the Julia state by moving leaves,
            such as :func:`treexchange.flux_state` (Equinox MLP <-> Flux ``Chain`` state).
        path: the tree path of ``values`` (e.g. ``("model_state",)``), prefixed to mismatch paths.
        report: return ``(tree, RestoreReport)``: which template leaves came from the file, which
            kept the template's value, which file entries were ignored, which were converted.
            Without it, a restore that kept or ignored anything emits a :class:`RestoreWarning`.

    Raises:
        MismatchError: the state does not fit the template; ``err.mismatches`` lists every problem.

    Example:
        >>> from treexchange import restore
        >>> import numpy as np
        >>> from treexchange import NamedTuple
        >>> state = NamedTuple(weight=np.ones((2, 3), np.float32), bias=np.zeros(2, np.float32), σ=())
        >>> like = {"weight": np.zeros((2, 3), np.float32), "bias": np.zeros(2, np.float32)}
        >>> out = restore(state, like, numpy=True)
        >>> list(out), out["weight"].sum()
        (['weight', 'bias'], np.float32(6.0))
        >>> out, report = restore(state, {"weight": like["weight"]}, allow_extra=True, report=True)
        >>> print(report)
        restored 1 of 1 template leaves from the file, ignored 1 file entry
          ignored (file data unused): bias
        >>> restore(state, {"weight": np.zeros((2, 4), np.float32)}, numpy=True, path=["m"])
        Traceback (most recent call last):
        ...
        treexchange._errors.MismatchError: the file's state of m does not fit the template (2 mismatches):
          m.weight: shape (2, 3) in file, (2, 4) in template
          m.bias: extra array float32 (2,) in file, not in template
    """
    root = tuple(path)
    options = Options(
        strict=strict, allow_missing=allow_missing, allow_extra=allow_extra, cast=cast, root=root
    )
    placer = Placer(numpy=numpy, sharding=sharding)
    log = options.log
    if like is None:
        if layout is not None:
            raise ValueError("layout= needs a template (like=)")
        result = _plain_checked(values, placer, options, root, log)
    elif layout is not None:
        result = _restore_through_layout(values, like, layout, options, placer, root)
    else:
        result, _ = check_and_build(values, like, options, placer, root)
    if report:
        return result, log.freeze()
    _warn_if_partial(log, options)
    return result


def _warn_if_partial(log: ReportLog, options: Options) -> None:
    """Template values kept without being named, or file data ignored: say so (report=False)."""
    unnamed_kept = log.kept if options.missing.bare else []
    if not unnamed_kept and not log.ignored:
        return
    advice = "report=True returns this as a treexchange.RestoreReport"
    if unnamed_kept:
        advice += "; allow_missing=[paths] names the template values you mean to keep"
    warnings.warn(
        f"partial restore: {log.freeze()}\n({advice})", RestoreWarning, stacklevel=_caller_stacklevel()
    )


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside treexchange (restore may be called by load)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("treexchange."):
        level += 1
        frame = frame.f_back  # type: ignore[assignment]
    return level


def _restore_through_layout(
    values: Any,
    like: Any,
    layout: Callable[[Any], Any],
    options: Options,
    placer: Placer,
    root: tuple[Any, ...],
) -> Any:
    import jax  # jax is costly to import: loaded on first use

    pairs, treedef = jax.tree_util.tree_flatten_with_path(like)
    stand_ins = [
        LeafRef(i, leaf, tuple(kp)) if is_array_template(leaf) else leaf for i, (kp, leaf) in enumerate(pairs)
    ]
    view = layout(jax.tree_util.tree_unflatten(treedef, stand_ins))
    _, restored = check_and_build(values, view, options, placer, root)
    for ref in stand_ins:
        if isinstance(ref, LeafRef) and ref.fixed is not None and ref.index not in restored:
            # A model leaf with no Julia counterpart, given its value by the layout.
            restored[ref.index] = placer.place(
                np.asarray(ref.fixed, dtype=ref.dtype), None, ref.keypath, ref.template
            )
    unused = [ref for ref in stand_ins if isinstance(ref, LeafRef) and ref.index not in restored]
    if unused:
        # A layout that drops a model array would silently leave it unrestored: refuse.
        raise MismatchError(
            [
                Mismatch(
                    "missing",
                    (*root, jax.tree_util.keystr(ref.keypath)),
                    "from the layout's view of the template",
                )
                for ref in unused
            ],
            header=f"the layout does not cover {len(unused)} array(s) of the template",
        )
    leaves = [restored[x.index] if isinstance(x, LeafRef) else x for x in stand_ins]
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _plain_checked(
    values: Any, placer: Placer, options: Options, root: tuple[Any, ...], log: ReportLog
) -> Any:
    """No template: every array becomes a jax array of its own dtype, unless jax cannot hold
    that dtype (64-bit without x64): then ``cast`` decides, value by value, as with a template."""
    mode = options.cast_mode
    dtypes: dict[int, np.dtype | None] = {}
    problems: list[Mismatch] = []

    def check(array: np.ndarray, path: tuple[Any, ...], jpath: KeyPath) -> None:
        dest = placer.holds(array.dtype, to_numpy=placer.to_numpy(None, jpath))
        dtypes[id(array)] = None if dest == array.dtype else dest
        held = f"jax without x64 holds {array.dtype.name} as {dest.name}"
        if dest == array.dtype:
            pass
        elif mode == "none":
            problems.append(Mismatch("dtype", path, f"{array.dtype.name} in file ({held})"))
        else:
            loss = conversion_loss(array, dest, mode)
            if loss is not None:
                problems.append(Mismatch("value", path, f"{array.dtype.name} in file ({held}): {loss}"))
            else:
                log.converted.append((path, array.dtype.name, dest.name))
        log.restore(path, array=True)

    _walk_plain(values, root, (), check)
    if problems:
        n = len(problems)
        where = f" of {root[0]}" if root else ""
        head = f"the file's state{where} cannot be held as it is ({n} array{'s' if n != 1 else ''})"
        hints = set().union(*(fixes_for_conversion(d, mode, x64=True) for d in dtypes.values() if d))
        raise restore_error(problems, head, hints, ())
    return _walk_plain(values, root, (), lambda a, p, jp: placer.place(a, dtypes[id(a)], jp))


def _walk_plain(
    value: Any,
    path: tuple[Any, ...],
    jpath: KeyPath,
    on_array: Callable[[np.ndarray, tuple[Any, ...], KeyPath], Any],
) -> Any:
    """Arrays handed to ``on_array``, containers rebuilt with their order and types kept."""

    def child(v: Any, key: Any, j: Any) -> Any:
        return _walk_plain(v, (*path, key), (*jpath, j), on_array)

    if isinstance(value, np.ndarray) and value.dtype != object:
        return on_array(value, path, jpath)
    if isinstance(value, NamedTuple):
        return NamedTuple((k, child(v, _segment(k), _dict_key(k))) for k, v in value.items())
    if isinstance(value, JuliaStruct):
        fields = [(k, child(v, _segment(k), _dict_key(k))) for k, v in value.fields.items()]
        return JuliaStruct(value.type, fields, layout=value.layout)
    if isinstance(value, dict):
        return {k: child(v, _segment(k), _dict_key(k)) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(child(v, i + 1, _seq_key(i)) for i, v in enumerate(value))
    if isinstance(value, list):
        return [child(v, i + 1, _seq_key(i)) for i, v in enumerate(value)]
    return value
