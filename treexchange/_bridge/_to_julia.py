"""PyTree -> Julia state: turn JAX / Equinox / Flax / plain Python trees into value-model values.

The result is what ``treexchange.save`` writes and what Julia reads back as real ``NamedTuple``\\ s
and ``Tuple``\\ s (see docs/jax.md for the full table). No JAX import happens here: JAX arrays are
recognised only if ``jax`` is already imported (otherwise none can exist).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from operator import attrgetter
from typing import Any, Literal

import numpy as np

from .._errors import ConversionError, LimitError, TreePath
from .._juliatype import JuliaType
from .._limits import Limits
from .._recursion import stack_for_depth
from .._typeof import julia_eltype
from .._values import (
    BigFloat,
    BigInt,
    Int128,
    JuliaArray,
    JuliaBits,
    JuliaDict,
    JuliaStruct,
    Missing,
    NamedTuple,
    Singleton,
    Symbol,
    UInt128,
    Undef,
)
from ._classify import (
    is_dataclass_instance,
    is_jax_array,
    is_namedtuple_instance,
    is_non_state,
    is_prng_key,
    is_shape_dtype_struct,
    jax_module,
)

Lists = Literal["vector", "tuple"]
OnUnknown = Literal["error", "empty"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def to_julia(
    tree: Any,
    *,
    lists: Lists = "vector",
    on_unknown: OnUnknown = "error",
    path: TreePath = (),
) -> Any:
    """Convert a PyTree into Julia state (value-model values) that ``treexchange.save`` writes.

    ===========================================  ==============================================
    Python                                       Julia
    ===========================================  ==============================================
    ``dict`` (str keys), :class:`NamedTuple`     ``NamedTuple`` in the mapping's own order
    :class:`JuliaDict`, dict with other keys     ``Dict{K,V}`` (a :class:`JuliaDict`)
    namedtuple, dataclass, Equinox module        ``NamedTuple`` of all its fields, in order
    ``tuple`` / ``list``                         ``Tuple`` / ``Vector{Any}`` (``Tuple`` if
                                                 ``lists="tuple"``, as Flux's ``Chain.layers``)
    ``jax.Array`` / ``np.ndarray``               ``Array{T,N}``, same shape, dtype kept
    ``float`` / ``int`` / ``bool`` / ``complex`` ``Float64`` / ``Int64`` / ``Bool`` / ``ComplexF64``
    numpy scalars                                the same Julia type (``np.float32`` -> ``Float32``)
    ``str``, :class:`Symbol`, ``None``           ``String``, ``Symbol``, ``nothing``
    functions, classes, RNG objects, PRNG keys   ``()`` (no state, exactly as ``Flux.state``)
    ===========================================  ==============================================

    Args:
        tree: the PyTree (JAX arrays are copied to host memory with ``np.asarray``).
        lists: ``"vector"`` (default) writes Python lists as ``Vector{Any}``; ``"tuple"`` as ``Tuple``.
        on_unknown: what to do with an object that has no Julia counterpart (a set, bytes, an
            arbitrary class instance): ``"error"`` (default) raises, ``"empty"`` writes ``()``.
        path: the tree path of ``tree`` itself, used in error messages (e.g. ``("model_state",)``).

    An object used twice stays one object; a list or mutable ``JuliaStruct`` that contains itself
    gives the same cycle (legal Julia data); any other cycle is refused.

    Raises:
        ConversionError: a value has no Julia counterpart, or a cycle Julia cannot build (a dict,
            a Tuple or an immutable struct containing itself); the error's ``path`` locates it.

    Example:
        >>> from treexchange import to_julia
        >>> import numpy as np
        >>> state = to_julia({"weight": np.ones((2, 3), np.float32), "bias": [0.5], "σ": max})
        >>> list(state), state.weight.dtype, state.bias, state["σ"]
        (['weight', 'bias', 'σ'], dtype('float32'), [np.float64(0.5)], ())
        >>> to_julia((1, 2.0, True, None)), to_julia([1], lists="tuple")
        ((np.int64(1), np.float64(2.0), True, None), (np.int64(1),))
        >>> to_julia({"s": {1, 2}})
        Traceback (most recent call last):
        ...
        treexchange._errors.ConversionError: set has no Julia counterpart (at s)
    """
    if lists not in ("vector", "tuple"):
        raise ValueError(f"lists must be 'vector' or 'tuple', not {lists!r}")
    if on_unknown not in ("error", "empty"):
        raise ValueError(f"on_unknown must be 'error' or 'empty', not {on_unknown!r}")
    converter = _Converter(lists, on_unknown)
    with stack_for_depth(converter.max_depth):
        return converter.convert(tree, tuple(path), 0)


def convert_items(items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """:func:`to_julia` of each ``(name, tree)`` in one conversion, so that an object under two
    names stays one object (one dataset in the file). Used by ``treexchange.save``."""
    converter = _Converter("vector", "error")
    with stack_for_depth(converter.max_depth):
        return [(name, converter.convert(tree, (name,), 0)) for name, tree in items]


class _Converter:
    """One conversion: shared containers stay shared (converted once), cycles and excessive
    depth are refused with the tree path, every string is checked to be encodable as UTF-8."""

    def __init__(self, lists: Lists, on_unknown: OnUnknown, max_depth: int | None = None) -> None:
        self.lists = lists
        self.on_unknown = on_unknown
        self.max_depth = Limits().max_depth if max_depth is None else max_depth
        # ids of containers on the current path: a cycle would otherwise recurse forever.
        self.active: set[int] = set()
        # id -> converted container: an object used twice stays one object (one JLD2 dataset).
        self.done: dict[int, Any] = {}

    def convert(self, x: Any, path: TreePath, depth: int) -> Any:
        # ``depth`` counts the containers above ``x``: max_depth nested containers (and the leaf
        # inside the innermost) are admitted, the nesting the reader follows (Limits.max_depth).
        if depth > self.max_depth:
            raise LimitError(f"tree nested deeper than Limits().max_depth={self.max_depth} levels", path=path)
        if type(x) not in _CONTAINERS:  # (the usual containers skip the leaf tests)
            leaf = self._leaf(x, path)
            if leaf is not _NOT_LEAF:
                return leaf
        key = id(x)
        found = self.done.get(key)
        if found is not None:
            return found[1]
        if isinstance(x, JuliaStruct) and x.mutable:
            if x.type.name == "Core.TypeVar":
                return self._type_var(x, path, depth)
            return self._mutable_struct(x, path, depth)
        if type(x) is list and self.lists == "vector":
            return self._vector(x, path, depth)
        if key in self.active:
            raise ConversionError("the tree contains a cycle (a container inside itself)", path=path)
        self.active.add(key)
        try:
            result = self._container(x, path, depth + 1)
        finally:
            self.active.discard(key)
        self.done[key] = (x, result)  # x kept alive: its id stays unique while we run
        return result

    def _mutable_struct(self, x: JuliaStruct, path: TreePath, depth: int) -> JuliaStruct:
        """A mutable struct is made before its fields, so a cycle through it (a node whose
        parent points back to it) closes on the converted object, as in Julia."""
        _check_text(x.type.qualified(), path, name=True)
        result = JuliaStruct(x.type, layout=x.layout, mutable=True)
        self.done[id(x)] = (x, result)
        for k, v in x.fields.items():
            result.fields[_name(k, path)] = self.convert(v, (*path, k), depth + 1)
        return result

    def _type_var(self, x: JuliaStruct, path: TreePath, depth: int) -> JuliaStruct:
        """A ``TypeVar`` stays itself when its fields do (a name, bounds that are types): it is
        also a parameter of the types that use it (``Array{Float64, N} where N``: the ``var`` of
        the ``UnionAll`` and the ``N`` of its body, one object in Julia, which JLD2 writes once), and
        a :class:`JuliaType` holding it is not copied, so a copy here would split it in two."""
        _check_text(x.type.qualified(), path, name=True)
        self.done[id(x)] = (x, x)
        fields = [(_name(k, path), self.convert(v, (*path, k), depth + 1)) for k, v in x.fields.items()]
        if all(k in x.fields and x.fields[k] is v for k, v in fields):
            return x
        del self.done[id(x)]
        result = JuliaStruct(x.type, fields, layout=x.layout, mutable=x.mutable)
        self.done[id(x)] = (x, result)
        return result

    def _vector(self, x: list[Any], path: TreePath, depth: int) -> list[Any]:
        """A list (a ``Vector{Any}``, mutable in Julia too) is made before its elements, so a list
        that contains itself (``a = Any[]; push!(a, a)``) closes the cycle on the converted list,
        which the writer stores as JLD2.jl does: a reference to the list's own dataset."""
        result: list[Any] = []
        self.done[id(x)] = (x, result)
        result.extend(self.convert(v, (*path, i), depth + 1) for i, v in enumerate(x, 1))
        return result

    # --- leaves ---------------------------------------------------------------------------------
    def _leaf(self, x: Any, path: TreePath) -> Any:
        if type(x) is np.ndarray:  # the common leaf first: a model state is mostly arrays
            return _array(x, path)
        if isinstance(x, str):
            if isinstance(x, Symbol):
                _check_text(x, path, name=True)
                return x
            _check_text(x, path)
            return str(x)  # np.str_ and other str subclasses become plain String
        if x is None or isinstance(x, (Int128, UInt128, BigInt, BigFloat, Missing, Undef)):
            return x
        if isinstance(x, (Singleton, JuliaBits)):
            _check_text(x.type.qualified(), path, name=True)
            return x
        if isinstance(x, JuliaType):
            _check_text(x.qualified(), path, name=True)
            return x
        if isinstance(x, (bool, np.bool_)):
            return bool(x)
        if isinstance(x, int):
            return _python_int(x, path)
        if isinstance(x, float):
            return np.float64(x)
        if isinstance(x, complex):
            return np.complex128(x)
        if isinstance(x, np.generic):
            if not _has_julia_eltype(x.dtype):
                raise ConversionError(f"numpy scalar of dtype {x.dtype} has no Julia counterpart", path=path)
            return x
        if isinstance(x, np.ndarray):
            return _array(x, path)
        if is_prng_key(x):
            return ()  # RNG state: Flux.state drops it as ()
        if is_jax_array(x):
            # One host copy per jax array: used twice, it stays one array (one dataset).
            found = self.done.get(id(x))
            if found is None:
                found = self.done[id(x)] = (x, _array(np.asarray(x), path))
            return found[1]
        if is_shape_dtype_struct(x):
            raise ConversionError(
                "jax.ShapeDtypeStruct has no values to write (an abstract template?)", path=path
            )
        return _NOT_LEAF

    # --- containers -----------------------------------------------------------------------------
    def _container(self, x: Any, path: TreePath, depth: int) -> Any:
        if type(x) is NamedTuple:  # (its own dict: no Mapping protocol per field)
            plain = depth <= self.max_depth
            known = _ELTYPE_KNOWN
            return NamedTuple._of_dict(
                {
                    _name(k, path): v  # an array of a Julia element type: itself (no path made)
                    if plain and type(v) is np.ndarray and known.get(v.dtype)
                    else self.convert(v, (*path, k), depth)
                    for k, v in x._data.items()
                }
            )
        if isinstance(x, NamedTuple):
            return NamedTuple((_name(k, path), self.convert(v, (*path, k), depth)) for k, v in x.items())
        if isinstance(x, JuliaDict):
            return self._julia_dict(x, path, depth)
        if isinstance(x, Mapping):
            return self._mapping(x, path, depth)
        if is_namedtuple_instance(x):
            return NamedTuple(
                (_name(name, path), self.convert(getattr(x, name), (*path, name), depth))
                for name in type(x)._fields
            )
        if isinstance(x, tuple):
            if type(x) is tuple and len(x) > _LAYERS_MIN and self._layers_as_they_are(x, path, depth):
                return x
            # Iteration decides the elements (a subclass's __len__ is not trusted).
            return tuple(self.convert(v, (*path, i), depth) for i, v in enumerate(x, 1))
        if isinstance(x, list):
            items = [self.convert(v, (*path, i), depth) for i, v in enumerate(x, 1)]
            return tuple(items) if self.lists == "tuple" else items
        if isinstance(x, JuliaStruct):
            if x.type.name == "Core.TypeVar":
                return self._type_var(x, path, depth - 1)
            _check_text(x.type.qualified(), path, name=True)
            fields = [(_name(k, path), self.convert(v, (*path, k), depth)) for k, v in x.fields.items()]
            return JuliaStruct(x.type, fields, layout=x.layout, mutable=x.mutable)
        if isinstance(x, JuliaArray):
            _check_text(x.eltype.qualified(), path, name=True)
            flat = x.data.ravel(order="F")
            out = np.empty(flat.shape, dtype=object)
            for i, v in enumerate(flat):
                out[i] = self.convert(v, (*path, i + 1), depth)
            return JuliaArray(x.eltype, out.reshape(x.data.shape, order="F"))
        if is_dataclass_instance(x):
            # Every field in declaration order, static ones included: Flux.state keeps numbers too.
            return NamedTuple(
                (f.name, self.convert(getattr(x, f.name, None), (*path, f.name), depth))
                for f in dataclasses.fields(x)
            )
        if is_non_state(x):
            return ()
        custom = self._custom_pytree(x, path, depth)
        if custom is not _NOT_LEAF:
            return custom
        if self.on_unknown == "empty":
            return ()
        raise ConversionError(f"{type(x).__name__} has no Julia counterpart", path=path)

    def _mapping(self, x: Mapping[Any, Any], path: TreePath, depth: int) -> Any:
        """The one rule for plain mappings: ``str`` keys make a ``NamedTuple`` (what Lux's ``ps``
        and a Flux state are); any other key makes a Julia ``Dict``."""
        items = list(x.items())  # one pass: a mapping whose __len__ or keys() lie is read once
        if all(isinstance(k, str) and not isinstance(k, Symbol) for k, _ in items):
            return NamedTuple((_name(k, path), self.convert(v, (*path, k), depth)) for k, v in items)
        return self._julia_dict(dict(items), path, depth)

    def _julia_dict(self, x: Mapping[Any, Any], path: TreePath, depth: int) -> JuliaDict:
        out = JuliaDict()
        out.julia_type = getattr(x, "julia_type", None)  # a Dict read from a file keeps its type
        # The usual entry (a plain str key, an array of a Julia element type) converts to
        # itself: taken as it is, without the entry's path, which only an error message needs.
        plain = depth <= self.max_depth
        items = list(x.items())
        if plain and _all_plain(items):
            out.update(items)  # (every entry the usual one: checked over whole columns)
            return out
        for k, v in items:
            if plain and type(k) is str and type(v) is np.ndarray and k.isascii():
                if _ELTYPE_KNOWN.get(v.dtype):
                    out[k] = v
                    continue
            seg = str(k)
            key = self.convert(k, (*path, seg), depth)
            try:
                out[key] = self.convert(v, (*path, seg), depth)
            except TypeError as err:
                if isinstance(err, ConversionError):
                    raise
                raise ConversionError(f"Dict key {k!r} cannot be hashed", path=path) from None
        return out

    def _layers_as_they_are(self, x: tuple[Any, ...], path: TreePath, depth: int) -> bool:
        """Whether ``x`` (a model's layers) converts to itself: every element a ``NamedTuple`` of
        numpy arrays of Julia element types, its names checked -- a few passes in C over all
        layers instead of a conversion per layer (each would be a copy of the layer)."""
        if depth + 1 > self.max_depth or set(map(type, x)) != {NamedTuple}:
            return False
        datas = list(map(_DATA, x))
        try:
            for names in set(map(tuple, datas)):
                if any(_name(k, path) is not k for k in names):
                    return False
        except ConversionError:
            return False  # (the layer by layer conversion tells where)
        values = [v for d in datas for v in d.values()]
        return set(map(type, values)) == {np.ndarray} and all(
            _ELTYPE_KNOWN.get(d) for d in set(map(_DTYPE, values))
        )

    def _custom_pytree(self, x: Any, path: TreePath, depth: int) -> Any:
        """Other registered JAX pytree nodes: named children -> NamedTuple, positional -> Tuple."""
        jax = jax_module()
        if jax is None:
            return _NOT_LEAF
        tu = jax.tree_util
        pairs, _ = tu.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
        if len(pairs) == 1 and pairs[0][1] is x:
            return _NOT_LEAF  # jax sees a leaf: not a container
        names: list[str] = []
        for keypath, _child in pairs:
            (k,) = keypath
            if isinstance(k, tu.GetAttrKey):
                names.append(k.name)
            elif isinstance(k, tu.DictKey) and isinstance(k.key, str):
                names.append(k.key)
            else:
                names = []
                break
        if names and len(set(names)) == len(names):
            return NamedTuple(
                (n, self.convert(child, (*path, n), depth)) for n, (_, child) in zip(names, pairs)
            )
        return tuple(self.convert(child, (*path, i), depth) for i, (_, child) in enumerate(pairs, 1))


def _check_text(text: str, path: TreePath, *, name: bool = False) -> None:
    """Refuse text that has no UTF-8 form (lone surrogates), which every Julia string needs;
    with ``name``, also a NUL character, which Julia forbids in a Symbol (and so in field and
    type names) and HDF5 ends a member name at."""
    if name and "\x00" in text:
        raise ConversionError(
            f"name {text[:40]!r} contains a NUL character, which a Julia Symbol cannot hold", path=path
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            bad = text[err.start : err.end].encode("unicode_escape").decode("ascii")
            raise ConversionError(
                f"text {text[:40]!r} holds {bad}, a lone surrogate, which has no UTF-8 form "
                "(Julia strings, names and Symbols are UTF-8)",
                path=path,
            ) from None


def _name(key: Any, path: TreePath) -> str:
    """A NamedTuple field or struct field name, checked (each distinct plain name once: a
    model repeats ``weight`` and ``bias`` thousands of times)."""
    if type(key) is str and key in _NAMES_CHECKED:
        return key
    if not isinstance(key, str):
        raise ConversionError(f"field name {key!r} is not a str", path=path)
    _check_text(key, (*path, key), name=True)
    if type(key) is str and len(_NAMES_CHECKED) < _NAMES_KEPT:
        _NAMES_CHECKED.add(key)
    return str(key)


_NAMES_CHECKED: set[str] = set()  # names that passed _check_text (a check of the text alone)
_NAMES_KEPT = 4096


class _NotLeaf:
    def __repr__(self) -> str:
        return "<not a leaf>"


_NOT_LEAF: Any = _NotLeaf()


def _python_int(x: int, path: TreePath) -> Any:
    if _INT64_MIN <= x <= _INT64_MAX:
        return np.int64(x)
    if -(1 << 127) <= x < (1 << 127):
        return Int128(x)  # Julia widens integer literals the same way
    if 0 <= x < (1 << 128):
        return UInt128(x)
    return BigInt(x)  # JLD2 writes it as its base-62 String


def _has_julia_eltype(dtype: np.dtype) -> bool:
    found = _ELTYPE_KNOWN.get(dtype)
    if found is None:
        try:
            julia_eltype(dtype)  # the one numpy <-> Julia mapping
            found = True
        except ConversionError:
            found = False
        if len(_ELTYPE_KNOWN) < _NAMES_KEPT:
            _ELTYPE_KNOWN[dtype] = found
    return found


_ELTYPE_KNOWN: dict[np.dtype, bool] = {}  # dtype -> has a Julia element type


def _array(a: np.ndarray, path: TreePath) -> np.ndarray:
    if not _has_julia_eltype(a.dtype):
        raise ConversionError(f"array of dtype {a.dtype} has no Julia element type", path=path)
    return a


def _all_plain(items: list[tuple[Any, Any]]) -> bool:
    """Every entry the usual one of :meth:`_Converter._julia_dict` (a plain ASCII ``str`` key, a
    numpy array of a Julia element type), checked with a few passes in C over the columns."""
    if not items:
        return False
    keys, values = zip(*items)
    return (
        set(map(type, keys)) == {str}
        and all(map(str.isascii, keys))
        and set(map(type, values)) == {np.ndarray}
        and all(_ELTYPE_KNOWN.get(d) for d in {v.dtype for v in values})
    )


_LAYERS_MIN = 16  # from this many elements a tuple is checked whole (_layers_as_they_are)
_DATA = attrgetter("_data")
_DTYPE = attrgetter("dtype")

_CONTAINERS = frozenset({NamedTuple, JuliaDict, dict, tuple, list})
"""Types (exactly these, no subclass) that are containers, never leaves: a model's thousands of
layers skip the dozen leaf tests of :meth:`_Converter._leaf`."""
