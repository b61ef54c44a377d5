"""``tx.from_lux``: a runnable Python model from a trained Lux model's ``ps``/``st``, with no template.

Lux keeps the weights (``ps``) and the state (``st``) apart from the model, and most Lux layers are
Flux layers under other names, so the port goes through Flux (docs/from_lux.md):

1. the Lux model text is parsed into the Layer tree of the equivalent Flux model
   (:mod:`._luxarch`);
2. :func:`~._fromflux.build_target` builds the Equinox / nnx / linen model of that tree by shape;
3. one restore of ``ps`` and ``st`` with the Lux layout (:func:`~._flux.lux_state`) puts every Lux
   array at its Flux place, checking the file against the shapes the architecture implies (a
   :class:`~treexchange.MismatchError` lists every misfit with its path in the file).

Lux's ``Recurrence(cell)`` keeps only the last time step, which no Flux layer does: that step is
taken after the ported layer, and a Chain around it is ported part by part (:class:`~._luxarch.LuxPiece`).

The Lux version (0.5 or ≥ 1) decides the names and bias shapes the layout expects; it is read
from ``ps`` when not given (:func:`lux_version`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from treexchange._bridge import restore
from treexchange._errors import (
    ConversionError,
    PathSegment,
    TreePath,
    TreexchangeError,
    UnsupportedError,
    format_path,
)
from treexchange._port._componentarray import component_tree, is_component_array
from treexchange._port._flux import lux_state
from treexchange._port._fromflux import build_target, entry_path, read_entries, value_at
from treexchange._port._lux import LUX_VERSIONS
from treexchange._port._luxarch import LuxPiece, parse_lux_architecture
from treexchange._port._spec import DEFAULT_FLUX_ERA, Layer
from treexchange._port._statefill import flat_vector
from treexchange._port._wholemodel import refuse_cycles
from treexchange._values import JuliaStruct, NamedTuple

# ps names only one Lux version uses: the 0.5 recurrent cells' and Lux ≥ 1's two recurrent biases.
_V05_NAMES = frozenset({"weight_i", "weight_h", "bias_i", "bias_h"})
_V1_NAMES = frozenset({"bias_ih", "bias_hh"})


def lux_version(ps: Any) -> str:
    """``"0.5"`` or ``"1"``: the Lux version whose names and shapes ``ps`` has.

    Lux 0.5 names its LSTM/GRU matrices ``weight_i``/``weight_h``, gives a recurrent cell one
    ``bias`` (beside ``weight_ih`` for the RNN cell), and keeps a trailing axis of 1 on the Dense and
    Conv biases (``(out, 1)``); Lux ≥ 1 has ``bias_ih``/``bias_hh`` and ``(out,)`` biases. A ``ps``
    with neither sign (no biases, only normalisations) reads the same under both: ``"1"``.

    Raises:
        ConversionError: ``ps`` shows signs of both versions.

    Example:
        >>> import numpy as np
        >>> from treexchange import NamedTuple
        >>> lux_version(NamedTuple(layer_1=NamedTuple(weight=np.ones((3, 2)), bias=np.ones((3, 1)))))
        '0.5'
        >>> lux_version(NamedTuple(weight_ih=np.ones((8, 2)), weight_hh=np.ones((8, 2)), bias_ih=np.ones(8)))
        '1'
    """
    signs: dict[str, TreePath] = {}
    for path, node in _nodes(ps, ()):
        keys = set(node)
        if keys & _V05_NAMES or ("weight_ih" in keys and "bias" in keys):
            signs.setdefault("0.5", path)
        if keys & _V1_NAMES:
            signs.setdefault("1", path)
        bias = node.get("bias")
        if isinstance(bias, np.ndarray) and bias.ndim > 1 and "scale" not in keys:
            signs.setdefault("0.5", (*path, "bias"))  # Dense (out, 1), Conv (1, …, out, 1)
    if len(signs) == 2:
        raise ConversionError(
            f"ps mixes Lux 0.5 names/shapes (at {_text(signs['0.5'])}) with Lux ≥ 1's (at "
            f"{_text(signs['1'])}): pass lux='0.5' or lux='1'"
        )
    return next(iter(signs), "1")


def _nodes(tree: Any, path: TreePath) -> Any:
    if isinstance(tree, Mapping) and not isinstance(tree, JuliaStruct):
        yield path, tree
        for key, value in tree.items():
            yield from _nodes(value, (*path, key))
    elif isinstance(tree, (tuple, list)):
        for i, value in enumerate(tree):
            yield from _nodes(value, (*path, i + 1))


def _text(path: TreePath) -> str:
    return ".".join(map(str, path)) or "the top"


def _has_arrays(tree: Any) -> bool:
    if isinstance(tree, np.ndarray):
        return True
    if isinstance(tree, Mapping):
        return any(_has_arrays(v) for v in tree.values())
    if isinstance(tree, (tuple, list)):
        return any(_has_arrays(v) for v in tree)
    return False


def from_lux(
    path: str | os.PathLike[str],
    ps: str | Sequence[PathSegment] = "ps",
    st: str | Sequence[PathSegment] | None = "st",
    architecture: str | Mapping[str, str] | None = None,
    *,
    target: str = "equinox",
    lux: str | None = None,
    key: Any = None,
) -> Any:
    """A runnable Equinox (or Flax nnx, or Flax linen) model from a trained Lux model's ``ps``/``st``.

    ``architecture`` is the Lux model as Lux prints it (``"Chain(Dense(2 => 8, relu), Dense(8 =>
    1))"``), parsed, never evaluated, and checked against the file's arrays. A custom Lux container
    (a struct of named layers run by its own code, such as the Lux docs' ``SpiralClassifier``) is
    given per named part, ``{"lstm_cell": "LSTMCell(2 => 8)", "classifier": "Dense(8 => 1,
    sigmoid)"}``: the result is a dict of ported parts, for the user's code to compose. Parts whose
    ``ps`` holds no array (a custom layer without weights) may be left out.

    The Python models follow :func:`treexchange.from_flux`'s conventions: the Equinox model takes
    ONE sample (``jax.vmap`` for a batch) with the Julia axes reversed (a sequence is ``(time,
    features)``), nnx and linen take a batch with channels last (``(batch, time, features)``). A Lux
    recurrent cell (``LSTMCell``, ``Recurrence(…; return_sequence=true)``,
    ``StatefulRecurrentCell``) is the layer running it over a sequence from Lux's zero state and
    returning every step's output (its ``.cell`` steps once); ``Recurrence(cell)`` returns the last
    step only, as Lux does (a Chain around it is ported part by part, as the target's Sequential).
    An Equinox model with BatchNorm is ``(model, state)``. ``Float64`` arrays (SciML models often
    train in it) are rounded to ``Float32`` unless JAX runs with ``jax_enable_x64``, as
    :func:`treexchange.from_flux` does: the built model follows JAX's default dtype (under
    ``jax_enable_x64`` a ``Float32`` file widens exactly into Equinox's Float64 layers, and a
    ``Float64`` one rounds to Flax's Float32 parameters).

    ``ps`` and ``st`` are entries' names, or paths into an entry as errors print them, a tuple
    beginning with the entry's name (``("ckpt", "ps")`` for ``jldsave(path; ckpt = (; epoch, ps,
    st))``: field or key names, and 1-based positions in a Tuple or Vector), as for
    :func:`treexchange.from_flux`. A step that leads nowhere is a ``ConversionError`` at the part of
    the path that exists, naming what is there.

    Args:
        path: the JLD2 file.
        ps: the entry (or path) holding the Lux parameters (a NamedTuple tree, or the
            ``ComponentArray`` of one, as ComponentArrays.jl keeps it: a layer without parameters
            is an empty range there, read as its empty NamedTuple; or a flat vector of them,
            cut in the order and shapes of the ``ps`` the architecture implies).
        st: the entry (or path) holding the Lux states (BatchNorm's running statistics), or
            ``None`` when the file has none (then the model must not need them). The default
            ``"st"`` is the ``st`` beside ``ps``: the entry ``st``, or with ``ps=("ckpt", "ps")``
            the path ``("ckpt", "st")`` (a top-level entry named ``st`` is then ``("st",)``).
        architecture: the Lux model text, or a dict from the names of ``ps``'s top-level entries to
            the text of each.
        target: ``"equinox"``, ``"nnx"`` or ``"linen"`` (the pair ``(module, variables)``).
        lux: ``"0.5"`` or ``"1"``; by default read from ``ps`` (:func:`lux_version`).
        key: a ``jax.random`` key for the (overwritten) initial weights of a model that needs them.

    Raises:
        ConversionError: architecture text that is not a Lux model, or a dict naming entries ``ps``
            lacks (or leaving out one holding arrays).
        MismatchError: the file's arrays do not fit the architecture (every misfit, with its path).
        UnsupportedError: a Lux layer with no Flux twin (docs/from_lux.md lists what ports).

    Example:
        >>> import os, tempfile, jax, numpy as np
        >>> import treexchange as tx
        >>> rng = np.random.default_rng(0)
        >>> w1, b1 = rng.standard_normal((8, 2), np.float32), rng.standard_normal((8, 1), np.float32)
        >>> w2, b2 = rng.standard_normal((1, 8), np.float32), rng.standard_normal((1, 1), np.float32)
        >>> nt = tx.NamedTuple
        >>> ps = nt(layer_1=nt(weight=w1, bias=b1), layer_2=nt(weight=w2, bias=b2))
        >>> st = tx.NamedTuple(layer_1=tx.NamedTuple(), layer_2=tx.NamedTuple())
        >>> path = os.path.join(tempfile.mkdtemp(), "lux.jld2")
        >>> tx.save(path, ps=ps, st=st)
        >>> model = tx.from_lux(path, architecture="Chain(Dense(2 => 8, relu), Dense(8 => 1))")
        >>> x = np.array([0.5, -1.0], np.float32)
        >>> want = w2 @ np.maximum(w1 @ x + b1[:, 0], 0) + b2[:, 0]
        >>> bool(np.allclose(model(jax.numpy.asarray(x)), want, atol=1e-5))
        True
        >>> tx.save(path, ckpt=tx.NamedTuple(epoch=10, ps=ps, st=st))  # a checkpoint: paths into it
        >>> same = tx.from_lux(path, ("ckpt", "ps"), architecture="Chain(Dense(2 => 8, relu), Dense(8 => 1))")
        >>> bool(np.allclose(same(jax.numpy.asarray(x)), want, atol=1e-5))
        True
    """
    if architecture is None:
        raise ConversionError(
            "from_lux needs architecture=: the Lux model text (Lux files hold ps/st, not the model)"
        )
    if lux is not None and lux not in LUX_VERSIONS:
        raise ValueError(f"lux must be one of {', '.join(LUX_VERSIONS)} or None, not {lux!r}")
    ps_path, st_path = _places(ps, st)
    ps_value, st_value = _read_places(path, ps_path, st_path, st_beside_ps=st == "st")
    refuse_cycles(ps_value, ps_path)  # (a damaged file's reference back to an ancestor: the walks
    if st_value is not None:  # below follow every field and would never end)
        refuse_cycles(st_value, st_path or ())
    if is_component_array(ps_value):  # ComponentArray(ps), as Optimization.jl / DiffEqFlux users save it
        ps_value = component_tree(ps_value, path=ps_path)
    elif flat_vector(ps_value) is not None and not isinstance(architecture, str):
        raise ConversionError(
            "ps is a flat vector (getdata of a ComponentArray): its parts cannot be told apart; pass "
            "the whole model's text as architecture=",
            path=ps_path,
        )
    version = lux if lux is not None else lux_version(ps_value)
    port = functools.partial(_port, target=target, lux=version, key=key, lux_given=lux is not None)
    if isinstance(architecture, str):
        return port(parse_lux_architecture(architecture), ps_value, st_value, ps_path, st_path)
    if not isinstance(architecture, Mapping):
        raise TypeError(f"architecture must be the Lux text or a dict of texts, not {type(architecture)}")
    parts = _parts(architecture, ps_value, ps_path)
    return {
        name: port(
            parse_lux_architecture(text),
            ps_value[name],
            None if st_value is None else _part(st_value, name, st_path or ()),
            (*ps_path, name),
            None if st_path is None else (*st_path, name),
        )
        for name, text in parts.items()
    }


def _places(
    ps: str | Sequence[PathSegment], st: str | Sequence[PathSegment] | None
) -> tuple[TreePath, TreePath | None]:
    """The tree paths of ``ps`` and ``st``; the default ``st="st"`` is the ``st`` beside ``ps``."""
    ps_path = entry_path(ps)
    if st is None:
        return ps_path, None
    st_path = (*ps_path[:-1], "st") if st == "st" else entry_path(st)
    if st_path[: len(ps_path)] == ps_path or ps_path[: len(st_path)] == st_path:
        raise ConversionError(
            f"ps ({format_path(ps_path)}) and st ({format_path(st_path)}) must be two places, neither "
            "inside the other",
            path=ps_path,
        )
    return ps_path, st_path


def _read_places(
    path: str | os.PathLike[str], ps_path: TreePath, st_path: TreePath | None, *, st_beside_ps: bool
) -> tuple[Any, Any]:
    """The values at ``ps_path`` and ``st_path`` (one read of an entry holding both)."""
    entries = read_entries(path, [ps_path] if st_path is None else [ps_path, st_path])
    ps_value = value_at(entries[str(ps_path[0])], ps_path)
    if st_path is None:
        return ps_value, None
    try:
        return ps_value, value_at(entries[str(st_path[0])], st_path)
    except ConversionError as err:
        if not (st_beside_ps and len(st_path) > 1):
            raise
        raise ConversionError(
            f"{err.message}; st defaults to the st beside ps: pass st=None for a model without states, "
            "or st= the path of its states",
            path=err.path,
        ) from None


def _parts(architecture: Mapping[str, str], ps_value: Any, ps_path: TreePath) -> dict[str, str]:
    """The named parts, checked against the top-level entries of ``ps``."""
    if not isinstance(ps_value, Mapping) or isinstance(ps_value, JuliaStruct):
        raise ConversionError("architecture names parts, but ps is not a NamedTuple of parts", path=ps_path)
    unknown = [name for name in architecture if name not in ps_value]
    if unknown:
        raise ConversionError(
            f"architecture names {unknown}, which ps lacks (its entries: {list(ps_value)})", path=ps_path
        )
    left_out = [name for name, value in ps_value.items() if name not in architecture and _has_arrays(value)]
    if left_out:
        raise ConversionError(
            f"ps entries {left_out} hold arrays but architecture does not describe them", path=ps_path
        )
    for name, text in architecture.items():
        if not isinstance(text, str):
            raise TypeError(f"architecture[{name!r}] must be the Lux text of that part, not {type(text)}")
    return dict(architecture)


def _part(value: Any, name: str, path: tuple[PathSegment, ...]) -> Any:
    if isinstance(value, Mapping) and not isinstance(value, JuliaStruct) and name in value:
        return value[name]
    raise ConversionError(f"no entry {name!r} here, where the architecture has a part", path=path)


def _port(
    piece: LuxPiece,
    ps_value: Any,
    st_value: Any,
    ps_path: tuple[PathSegment, ...],
    st_path: tuple[PathSegment, ...] | None,
    *,
    target: str,
    lux: str,
    key: Any,
    lux_given: bool = True,
) -> Any:
    if piece.layer is None:  # a Chain around a last-step Recurrence: its parts, run in order
        if flat_vector(ps_value) is not None:
            raise UnsupportedError(
                "ps is a flat vector and the model a Chain around Recurrence(…) (ported part by part): "
                "save ps as a NamedTuple or a ComponentArray",
                path=ps_path,
            )
        steps = []
        for name, part in piece.parts:
            sub_st = None if st_path is None else _part(st_value, name, st_path)
            sub_st_path = None if st_path is None else (*st_path, name)
            ps_part = _part(ps_value, name, ps_path)
            model = _port(
                part, ps_part, sub_st, (*ps_path, name), sub_st_path, target=target, lux=lux, key=key
            )
            steps.append((model, False))  # a part's own last step is taken in it
        return _in_order(steps, target)
    layer = piece.layer
    _check_layers(layer, lux, st_value is None)
    paths = [ps_path] if st_path is None else [ps_path, st_path]
    prefix = _common_prefix(paths)
    flat = flat_vector(ps_value)
    values = None if flat is not None else _nest(paths, [ps_value, st_value], prefix)

    chosen = [lux]  # (a flat vector's length may show the other Lux version: see fill)

    def view(model: Any) -> Any:
        # ps and st in one restore: a restore of one part keeps the other's leaves as the build has them
        # (shapes only, for a model built by shape)
        if st_path is None:
            return _nest(paths, [lux_state(model, lux=chosen[0], part="ps")], prefix)
        return _nest(paths, list(lux_state(model, lux=chosen[0])), prefix)

    def fill(model: Any) -> Any:
        # (cast="round", as from_flux's: the built model's dtypes rule; Float64 weights, which SciML
        # models often have, round to JAX's default Float32)
        given = values
        if flat is not None:  # cut in the order and shapes of the ps this model has in Lux
            ps_tree = _cut_for_version(model, flat, ps_path, chosen, try_others=not lux_given)
            given = _nest(paths, [ps_tree, st_value], prefix)
        return restore(given, like=model, layout=view, path=prefix, cast="round")

    model = build_target(layer, fill, target=target, era=DEFAULT_FLUX_ERA, key=key)
    return _in_order([(model, True)], target) if piece.last_step else model


def _common_prefix(paths: list[TreePath]) -> TreePath:
    """The steps all ``paths`` begin with, short of the last step of each: where one restore of
    them starts (``[("ckpt", "ps"), ("ckpt", "st")]`` -> ``("ckpt",)``)."""
    first, most = paths[0], min(len(p) for p in paths) - 1
    k = 0
    while k < most and all(p[k] == first[k] for p in paths):
        k += 1
    return first[:k]


def _nest(paths: list[TreePath], values: list[Any], prefix: TreePath) -> Any:
    """Containers holding each value at its path below ``prefix``: ``[("ps", "cell"), ("st",
    "cell")]`` and ``[a, b]`` -> ``(ps = (cell = a,), st = (cell = b,))``, so that a restore at
    ``prefix`` names the file's paths in its messages. A step by position is a Tuple holding ``()``
    at the other positions (the same in the file's tree and the model's: nothing to restore)."""
    root: dict[Any, Any] = {}
    for path, value in zip(paths, values):
        node = root
        for segment in path[len(prefix) : -1]:
            node = node.setdefault(segment, {})
        node[path[-1]] = value

    def freeze(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if all(isinstance(k, int) for k in node):
            return tuple(freeze(node.get(i, ())) for i in range(1, max(node) + 1))
        return NamedTuple((str(k), freeze(v)) for k, v in node.items())

    return freeze(root)


def _check_layers(layer: Layer, lux: str, no_st: bool) -> None:
    for sub in layer.walk():
        if sub.kind == "RNN" and lux == "0.5":
            raise UnsupportedError(
                "Lux 0.5's RNNCell starts from a hidden state of ones (its init_state default), a Flux "
                "RNN from zeros: the ported model would compute something else"
            )
        if no_st and sub.kind == "BatchNorm" and sub.args.get("track_stats", True):
            raise ConversionError("BatchNorm's running statistics are in Lux's st: pass st=")


def _in_order(steps: list[tuple[Any, bool]], target: str) -> Any:
    """The target's sequential model of ``(model, last_step)`` steps, the last time step taken after
    each step marked so (Lux's ``Recurrence(cell)``: time is the first axis of an Equinox sample, the
    second of an nnx/linen batch)."""
    if target == "equinox":
        import equinox as eqx  # costly to import: only for an Equinox model (already loaded by then)

        if any(isinstance(model, tuple) for model, _ in steps):
            raise UnsupportedError(
                "a Chain around Recurrence(cell) with BatchNorm is not ported to Equinox (each part "
                "would carry its own state): use target='nnx' or give the parts per name"
            )
        layers: list[Any] = []
        for model, last in steps:
            layers += [model, eqx.nn.Lambda(_last_of_sample)] if last else [model]
        return eqx.nn.Sequential(layers)
    if target == "nnx":
        from flax import nnx  # flax is optional (already loaded by the nnx build)

        return nnx.Sequential(
            *(f for model, last in steps for f in ([model, _last_of_batch] if last else [model]))
        )
    from flax import linen as nn  # flax is optional (already loaded by the linen build)

    modules: list[Any] = []
    variables: dict[str, dict[str, Any]] = {}
    for (module, module_variables), last in steps:
        for collection, tree in module_variables.items():  # linen names a list's modules by position
            variables.setdefault(collection, {})[f"layers_{len(modules)}"] = tree
        modules += [module, _last_of_batch] if last else [module]
    return nn.Sequential(modules), variables


def _last_of_sample(h: Any) -> Any:
    return h[-1]


def _last_of_batch(h: Any) -> Any:
    return h[:, -1]


def _cut_for_version(
    model: Any, flat: np.ndarray, path: TreePath, chosen: list[str], *, try_others: bool
) -> Any:
    """``flat`` cut as the ps of ``model`` in Lux ``chosen[0]``; when the version was not given and the
    length does not fit it, in the other version whose length it is (Lux 0.5's recurrent cells have
    one bias, Lux 1's two: nothing else in a flat vector tells them apart). ``chosen`` is updated."""
    concrete = _concrete(model)
    try:
        return cut_flat(lux_state(concrete, lux=chosen[0], part="ps"), flat, path=path)
    except ConversionError as first:
        for version in LUX_VERSIONS:
            if version == chosen[0]:
                continue
            try:
                ps_tree = cut_flat(lux_state(concrete, lux=version, part="ps"), flat, path=path)
            except TreexchangeError:
                continue
            if not try_others:  # (the version given does not fit; name the one that does)
                raise ConversionError(
                    f"{first.message}; it is the length of this architecture's ps in Lux {version} "
                    f"(lux={version!r}; lux={chosen[0]!r} was given)",
                    path=path,
                ) from None
            chosen[0] = version
            return ps_tree
        raise first from None


def _concrete(model: Any) -> Any:
    """``model`` with zeros for the shapes of a model built by shape (for its ps layout only)."""
    import jax  # jax is costly to import: loaded on first use

    def zeros(leaf: Any) -> Any:
        if isinstance(leaf, jax.ShapeDtypeStruct):  # (one zero seen at every place: no memory)
            return np.broadcast_to(np.zeros((), leaf.dtype), leaf.shape)
        return leaf

    return jax.tree.map(zeros, model)


def cut_flat(template: Any, flat: np.ndarray, *, path: TreePath = ()) -> Any:
    """``template`` (a Lux ``ps`` tree) with each array replaced by the next numbers of ``flat``.

    ``getdata(ComponentArray(ps))`` (or ``destructure``'s vector of a Lux model) holds ``ps``'s
    arrays column-major, one after the other, in the NamedTuple's order: the layers in order, each
    layer's parameters in Lux's order (Dense and Conv ``weight, bias``).

    Example:
        >>> dense = NamedTuple(weight=np.zeros((2, 3)), bias=np.zeros(2))
        >>> ps = NamedTuple(layer_1=dense, layer_2=NamedTuple())
        >>> cut = cut_flat(ps, np.arange(8.0))
        >>> cut["layer_1"]["weight"].tolist(), cut["layer_1"]["bias"].tolist()
        ([[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]], [6.0, 7.0])
    """
    arrays: list[tuple[int, ...]] = []

    def is_array(x: Any) -> bool:  # (a model built by shape has jax.ShapeDtypeStruct leaves)
        return isinstance(x, np.ndarray) or (hasattr(x, "shape") and hasattr(x, "dtype"))

    def shapes(tree: Any) -> None:
        if is_array(tree):
            arrays.append(tuple(tree.shape))
        elif isinstance(tree, Mapping):
            for value in tree.values():
                shapes(value)
        elif isinstance(tree, (tuple, list)):
            for value in tree:
                shapes(value)

    shapes(template)
    total = sum(int(np.prod(shape)) for shape in arrays)
    if total != flat.size:
        raise ConversionError(
            f"ps is a flat vector of {flat.size} numbers; the architecture's parameters are {total}: the "
            "vector of another model, or an architecture that is not its model",
            path=path,
        )
    start = 0

    def cut(tree: Any) -> Any:
        nonlocal start
        if is_array(tree):
            size = int(np.prod(tree.shape))
            piece = flat[start : start + size].reshape(tuple(tree.shape), order="F")
            start += size
            return piece
        if isinstance(tree, NamedTuple):
            return NamedTuple((k, cut(v)) for k, v in tree.items())
        if isinstance(tree, Mapping):
            return {k: cut(v) for k, v in tree.items()}
        if isinstance(tree, tuple):
            return tuple(cut(v) for v in tree)
        if isinstance(tree, list):
            return [cut(v) for v in tree]
        return tree

    return cut(template)
