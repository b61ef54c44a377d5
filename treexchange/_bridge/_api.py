"""``restore``: Julia state (value-model values) -> the template's PyTree, holding jax arrays."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import Mismatch, MismatchError, PathSegment
from .._values import JuliaStruct, NamedTuple
from ._classify import is_array_template
from ._place import KeyPath, Placer
from ._restore import LeafRef, Options, check_and_build


def restore(
    values: Any,
    like: Any = None,
    *,
    strict: bool = True,
    allow_missing: bool = False,
    allow_extra: bool = False,
    cast: bool = False,
    sharding: Any = None,
    numpy: bool = False,
    layout: Callable[[Any], Any] | None = None,
    path: Sequence[PathSegment] = (),
) -> Any:
    """Put Julia state into the structure of a template PyTree (an Equinox model, dicts, ...).

    The result has the template's structure and node types (Equinox modules rebuilt, static fields
    and functions taken from the template) and holds jax arrays, or numpy arrays with
    ``numpy=True``. Everything is checked before any array is copied; all problems are reported
    together in one :class:`~treexchange.MismatchError`, each :class:`~treexchange.Mismatch` with
    its path (``model_state.layers[2].weight: shape (5, 16) in file, (5, 32) in template``).

    Args:
        values: Julia state as :func:`treexchange.load` returns it (NamedTuples, tuples, numpy arrays).
        like: the template. ``None`` converts ``values`` as they are (arrays -> jax arrays, order kept).
        strict: by default every template entry must be in the file, nothing extra, fields in the
            same order, dtypes equal. ``strict=False`` turns on all three ``allow_*``/``cast`` options
            and ignores field order; shapes and kinds must always fit.
        allow_missing: entries absent from the file keep the template's value.
        allow_extra: entries of the file that the template lacks are ignored.
        cast: arrays and numbers are converted to the template's dtype instead of being reported.
        sharding: a ``jax.sharding.Sharding`` for every array, or a PyTree of them (``None`` = default
            device) that is a prefix of the template; each device reads only its own slice.
        numpy: return numpy arrays (zero-copy views of the file where possible) instead of jax arrays.
        layout: a function mapping the template to the shape of the Julia state by moving leaves,
            such as :func:`treexchange.flux_state` (Equinox MLP <-> Flux ``Chain`` state).
        path: the tree path of ``values`` (e.g. ``("model_state",)``), prefixed to mismatch paths.

    Raises:
        MismatchError: the state does not fit the template; ``err.mismatches`` lists every problem.

    Example:
        >>> import numpy as np
        >>> from treexchange import NamedTuple
        >>> state = NamedTuple(weight=np.ones((2, 3), np.float32), bias=np.zeros(2, np.float32), σ=())
        >>> like = {"weight": np.zeros((2, 3), np.float32), "bias": np.zeros(2, np.float32)}
        >>> out = restore(state, like, numpy=True)
        >>> list(out), out["weight"].sum()
        (['weight', 'bias'], np.float32(6.0))
        >>> restore(state, {"weight": np.zeros((2, 4), np.float32)}, numpy=True, path=["m"])
        Traceback (most recent call last):
        ...
        treexchange._errors.MismatchError: the file's state of m does not fit the template (2 mismatches):
          m.weight: shape (2, 3) in file, (2, 4) in template
          m.bias: extra array float32 (2,) in file, not in template
    """
    options = Options(strict=strict, allow_missing=allow_missing, allow_extra=allow_extra, cast=cast)
    placer = Placer(numpy=numpy, sharding=sharding)
    root = tuple(path)
    if like is None:
        if layout is not None:
            raise ValueError("layout= needs a template (like=)")
        return _plain(values, placer, ())
    if layout is not None:
        return _restore_through_layout(values, like, layout, options, placer, root)
    result, _ = check_and_build(values, like, options, placer, root)
    return result


def _restore_through_layout(
    values: Any,
    like: Any,
    layout: Callable[[Any], Any],
    options: Options,
    placer: Placer,
    root: tuple[Any, ...],
) -> Any:
    import jax

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


def _plain(value: Any, placer: Placer, jpath: KeyPath) -> Any:
    """No template: arrays placed, containers rebuilt with their order and types kept."""
    from ._restore import _dict_key, _seq_key

    if isinstance(value, np.ndarray) and value.dtype != object:
        return placer.place(value, None, jpath)
    if isinstance(value, NamedTuple):
        return NamedTuple((k, _plain(v, placer, (*jpath, _dict_key(k)))) for k, v in value.items())
    if isinstance(value, JuliaStruct):
        fields = [(k, _plain(v, placer, (*jpath, _dict_key(k)))) for k, v in value.fields.items()]
        return JuliaStruct(value.type, fields, layout=value.layout)
    if isinstance(value, dict):
        return {k: _plain(v, placer, (*jpath, _dict_key(k))) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_plain(v, placer, (*jpath, _seq_key(i))) for i, v in enumerate(value))
    if isinstance(value, list):
        return [_plain(v, placer, (*jpath, _seq_key(i))) for i, v in enumerate(value)]
    return value
