"""A value tree as JSON, with its numeric arrays stored elsewhere (a safetensors file, an orbax
checkpoint).

:func:`encode` turns any value-model value into a JSON-ready *skeleton*: containers, names, Julia
types, the ``()``/``nothing``/``missing`` markers and every non-array leaf are written out exactly
(numbers as their little-endian bytes in hex, so NaN payloads and ``-0.0`` survive); each numeric
array is handed to a callback that stores it and returns the JSON node that stands for it.
:func:`decode` is the inverse: it rebuilds the value, asking a callback for each array.

Node tags (``"t"``): ``nt`` (NamedTuple: ``f`` = ``[[name, node], ...]``), ``tuple`` / ``list``
(``v``), ``dict`` (``items`` = ``[[key, value], ...]``; ``type``, the Dict type the file stored, when
it has one: ``Dict{Int64, DriverModel{A} where A}`` holds what its entries alone would make
``Dict{Int64, EgoDriver{…}}``), ``group`` (an HDF5 group of a JLD2 file:
``items``), ``struct`` (``type``, ``f``; ``lay``, its layout's place in the root node's ``L``
table of struct layouts, :mod:`._layoutjson`; ``mut`` when its type is mutable), ``jarray``
(``eltype``, ``shape``, ``v`` in column-major order), ``array`` (a stored array: whatever the
callback wrote, at least ``dtype`` and ``shape``),
``num`` (numpy scalar: ``dtype``, ``hex``), ``int`` / ``float`` / ``complex`` / ``bool`` (Python
scalars), ``int128`` / ``uint128`` (decimal ``v``), ``bigint`` (``v`` in hex, as ``hex()`` writes
it: no digit limit, unlike decimal text; ``name``, the name of its type), ``bigfloat`` (``v``
its decimal text, ``name``), ``str``, ``sym``,
``nothing``, ``missing``, ``undef``, ``singleton`` (``type``), ``bits`` (``type``, ``hex``),
``type`` (a Julia type used as a type parameter: ``name``, ``p``), ``same`` (``k``: the object
a node marked ``"k": k`` earlier in the document stands for, met again: a Julia object referenced
from two places, such as an optimiser's ``IdDict`` keyed by the model's own weight arrays; version
2, written only when the document has one).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import (
    ConversionError,
    FormatError,
    LimitError,
    PathSegment,
    TreePath,
    UnsupportedError,
    format_path,
)
from .._expansion import Expansion
from .._juliatype import JuliaType
from .._limits import DEFAULT_LIMITS, path_depth, type_depth
from .._port._eras import GPU_ARRAYS
from .._recursion import stack_for_depth
from .._typeof import _DTYPE_TO_JULIA, closure_as_struct
from .._values import (
    MISSING,
    UNDEF,
    BigFloat,
    BigInt,
    Closure,
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
from ._layoutjson import LayoutReader, LayoutTable

TREE_FORMAT = "treexchange-tree"
TREE_VERSION = 2
"""The newest version read; a document is written as version 1 unless it holds ``same`` nodes."""

OnArray = Callable[[Any, TreePath], dict[str, Any]]
"""``on_array(array, path) -> node``: store a numeric array (a numpy array, or a lazy array node
with ``shape`` and ``dtype``), return the JSON node that refers to it (tag ``array`` is added)."""
GetArray = Callable[[dict[str, Any], TreePath], Any]
"""``get_array(node, path) -> array``: the array an ``array`` node refers to."""

TREE_DEPTH = path_depth(DEFAULT_LIMITS)
"""Segments a tree path in a document may have (2064: what a lazy node's path may have, 4 ×
``Limits.max_depth`` + 16). Encoding, decoding and listing a deeper tree is a LimitError: each level
is a few Python frames, and Python's recursion limit must not be what ends it."""
JSON_DEPTH = 3 * TREE_DEPTH + 2 * type_depth(DEFAULT_LIMITS) + 64
"""Nesting of JSON arrays and objects a document may have: three per tree level (a node, its
``f``/``v``/``items`` list, a ``[name, node]`` pair), two per level of a type's parameters. Text
nested deeper is refused before it is parsed (:func:`loads_document`): ``json`` recurses once per
level, in C, and with the limit raised for a deep file being read, text nested 10⁵ deep would
overflow the C stack (a crash, not an exception)."""


def stack_room() -> Any:
    """Room on Python's stack for a tree ``TREE_DEPTH`` deep (at most four frames per level
    decoding, one per JSON level in ``json``): Python's default limit of 1000 frames stopped a
    tree of 300 levels, which ``tx.save`` writes and ``load`` reads."""
    return stack_for_depth(DEFAULT_LIMITS.max_depth)


def _too_deep(path: TreePath) -> LimitError:
    return LimitError(
        f"tree deeper than {TREE_DEPTH} levels, the most a tree metadata document holds "
        "(4 × Limits.max_depth + 16)",
        path=path,
    )


_BLOCK = 1 << 20


def json_depth(raw: bytes) -> int:
    r"""The deepest nesting of arrays and objects in JSON text (UTF-8), brackets inside strings
    not counted; for text that is not JSON, a number that is no smaller. Linear time, no
    recursion, in blocks of 1 MiB (memory of its own: some 15 MiB whatever the text's size): it
    decides whether the text may be handed to ``json``.

    Example:
        >>> json_depth(rb'{"a": [[1], "]]][\"["], "b": "x\\"}'), json_depth(b"[]"), json_depth(b"7")
        (3, 1, 0)
    """
    depth = deepest = 0
    in_string = 0  # (1: the block starts inside a string)
    carried = 0  # backslashes that end the block before
    for start in range(0, len(raw), _BLOCK):
        codes = np.frombuffer(raw, np.uint8, min(_BLOCK, len(raw) - start), start)
        # (32-bit positions and 8-bit steps: a block is 1 MiB; half the time of 64-bit arrays,
        # which orbax's metadata of a few thousand arrays, checked on every import, noticed)
        positions = np.arange(codes.size, dtype=np.int32)
        positions[codes == ord("\\")] = -1
        # A quote ends or starts a string unless an odd run of backslashes comes right before it.
        last_other = np.maximum.accumulate(positions)
        quotes = np.flatnonzero(codes == ord('"'))
        before = np.where(quotes > 0, last_other[np.maximum(quotes - 1, 0)], -1)
        runs = quotes - 1 - before + np.where(before < 0, carried, 0)
        real = quotes[runs % 2 == 0]
        flips = np.zeros(codes.size, np.int8)
        flips[real] = 1
        outside = (np.cumsum(flips, dtype=np.int32) - flips + in_string) % 2 == 0  # (a quote: outside)
        opens = (codes == ord("[")) | (codes == ord("{"))
        closes = (codes == ord("]")) | (codes == ord("}"))
        step = opens.view(np.int8) - closes.view(np.int8)
        step *= outside
        levels = np.cumsum(step, dtype=np.int32)  # (within the block; the depth before it added as an int)
        deepest = max(deepest, depth + int(levels.max(initial=0)))
        depth += int(levels[-1])
        in_string = (in_string + real.size) % 2
        tail = codes.size - 1 - int(last_other[-1])  # (backslashes ending this block)
        carried = tail + (carried if last_other[-1] < 0 else 0)
    return deepest


def nests_deeper(raw: bytes, limit: int) -> bool:
    """Whether JSON text ``raw`` nests deeper than ``limit`` (:func:`json_depth`, skipped for text
    with no more openers than that: most documents stop at the count)."""
    return raw.count(b"[") + raw.count(b"{") > limit and json_depth(raw) > limit


def check_json_depth(raw: bytes, where: str) -> None:
    """A LimitError naming ``where`` when JSON text ``raw`` nests deeper than ``JSON_DEPTH``."""
    if raw.count(b"[") + raw.count(b"{") > JSON_DEPTH:  # (cheap: most documents stop here)
        depth = json_depth(raw)
        if depth > JSON_DEPTH:
            raise LimitError(
                f"{where}: JSON nested {depth} deep, deeper than the {JSON_DEPTH} levels a tree document has"
            )


def loads_document(text: str | bytes, where: str) -> Any:
    """JSON text of a file (a tree metadata document, an index) parsed, or a FormatError (not
    JSON) / LimitError (nested deeper than ``JSON_DEPTH``) naming ``where``.

    ``json`` recurses in C once per level of the text, up to Python's recursion limit, which a
    deep tree needs raised (:func:`stack_room`); on the main thread's stack, text nested to that
    limit would overflow it (a crash, not an exception). So the text is parsed on a thread of its
    own with a stack that holds the limit (:func:`_parse_on_a_deep_stack`), where it stops with a
    RecursionError; only then is its depth measured for the message (:func:`json_depth`, linear
    but a third of a parse: the documents that parse pay nothing for it).

    Example:
        >>> loads_document('{"a": [1]}', "f")
        {'a': [1]}
        >>> loads_document("[" * 100_000, "f")
        Traceback (most recent call last):
        ...
        treexchange._errors.LimitError: f: JSON nested 100000 deep, ... tree document has
    """
    try:
        return _parse_on_a_deep_stack(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise FormatError(f"{where}: not JSON: {err}") from None
    except (RecursionError, _NoDeepStack):
        pass
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    check_json_depth(raw, where)  # (deeper than a tree document: the message says how deep)
    try:  # (no thread could be made, or the limit was lower than JSON_DEPTH: within it, here)
        with stack_room():
            return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise FormatError(f"{where}: not JSON: {err}") from None
    except RecursionError:
        raise LimitError(f"{where}: JSON nested too deeply") from None


_DEEP_STACK = 512 << 20
"""Bytes of stack for the thread that parses JSON: ``json`` takes well under 1 KiB of C stack a
level, and the recursion limit stays below 500,000 frames (``stack_for_depth``)."""
_stack_size_lock = threading.Lock()


class _NoDeepStack(Exception):
    """No thread with a deep stack could be made (a cap on address space): parse the checked way."""


def _parse_on_a_deep_stack(text: str | bytes) -> Any:
    """``json.loads(text)`` on a thread with a ``_DEEP_STACK`` stack, the limit raised for a tree
    as deep as a document may be; its exception re-raised here."""
    out: dict[str, Any] = {}

    def parse() -> None:
        try:
            with stack_room():
                out["value"] = json.loads(text)
        except BaseException as err:  # (re-raised in the caller's thread)
            out["error"] = err

    with _stack_size_lock:
        try:
            before = threading.stack_size(_DEEP_STACK)
        except (ValueError, RuntimeError) as err:
            raise _NoDeepStack from err
        try:
            thread = threading.Thread(target=parse, name="treexchange-json", daemon=True)
            thread.start()
        except RuntimeError as err:  # (can't start new thread)
            raise _NoDeepStack from err
        finally:
            threading.stack_size(before)
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def dumps_document(document: Any, **options: Any) -> str:
    """``json.dumps(document, **options)`` of a tree metadata document (or an index holding one):
    ``json`` recurses once per level (three per tree level), with room for ``TREE_DEPTH``."""
    with stack_room():
        return json.dumps(document, **options)


DTYPES: dict[str, np.dtype] = {dt.name: dt for dt in _DTYPE_TO_JULIA}
"""Numeric dtypes a stored array may have, by numpy name (``bfloat16`` included)."""


class Group(dict):  # type: ignore[type-arg]
    """An HDF5 group of a JLD2 file (``"a/b"`` names), as opposed to a Julia ``Dict``."""


def is_numeric_array(value: Any) -> bool:
    """Whether ``value`` is an array stored as a tensor (numeric dtype, not an object array)."""
    dtype = getattr(value, "dtype", None)
    return (
        hasattr(value, "shape")
        and not isinstance(value, np.generic)
        and dtype is not None
        and np.dtype(dtype).newbyteorder("=") in _DTYPE_TO_JULIA
    )


class Sharing:
    """The objects of one document met so far (one per file: its roots may share objects).

    Encoding, an array, list, dict, struct or Julia array met a second time becomes a ``same``
    node naming the first one's ``k`` (given to it then); decoding, each node with a ``k`` is
    remembered and a ``same`` node is that very object. Without it a shared object would come back
    as copies, equal in value but no longer one object (Julia's ``IdDict`` keys, aliases).

    Decoding, ``file_size`` (the file's bytes) and ``where`` (its name) bound how far the values
    that ``same`` nodes place again may expand (:class:`treexchange._expansion.Expansion`:
    ``Limits.nodes_for(file_size)`` nodes, as a listing of the file has).
    """

    def __init__(self, file_size: int = 0, where: str = "") -> None:
        self.first: dict[int, tuple[dict[str, Any], Any]] = {}  # (the value kept: ids stay unique)
        self.count = 0
        self.decoded: dict[int, Any] = {}
        self._file = (file_size, where)
        self._expansion: Expansion | None = None
        self.devices: list[TreePath] = []  # (GPU arrays met encoding: device pointers, no weights)

    @property
    def expansion(self) -> Expansion:
        """The budget of the values ``same`` nodes place again (made when the first is met: a
        Sharing is made for every Dict key and type parameter decoded)."""
        if self._expansion is None:
            size, where = self._file
            self._expansion = Expansion(DEFAULT_LIMITS.nodes_for(size), where)
        return self._expansion

    def version(self) -> int:
        """The tree version a document written with this sharing needs."""
        return 2 if self.count else 1


def encode(
    value: Any, on_array: OnArray, path: TreePath = (), sharing: Sharing | None = None
) -> dict[str, Any]:
    """The JSON skeleton of ``value``; numeric arrays go to ``on_array``.

    Example:
        >>> tree = NamedTuple(weight=np.ones((2, 3), np.float32), σ=(), act=None)
        >>> skeleton = encode(tree, lambda a, p: {"shape": list(a.shape), "dtype": a.dtype.name})
        >>> skeleton["f"][0]
        ['weight', {'shape': [2, 3], 'dtype': 'float32', 't': 'array'}]
        >>> skeleton["f"][1:]
        [['σ', {'t': 'tuple', 'v': []}], ['act', {'t': 'nothing'}]]
    """
    table = LayoutTable(encode_type)
    outer = _NEST.inside
    inside: dict[int, TreePath] = {} if outer is None else outer
    _NEST.inside = inside
    try:
        with stack_room():
            node = _Encoder(on_array, table, Sharing() if sharing is None else sharing, inside).node(
                value, path
            )
    finally:
        _NEST.inside = outer
    if table.entries:
        node["L"] = table.entries  # the struct layouts the nodes below name (._layoutjson)
    return node


class _Nest(threading.local):
    """The containers being encoded by the outermost :func:`encode` running (in this thread). A
    Julia type's parameter may be a value (``Val{(1, 2)}``), encoded by an ``encode`` of its own;
    it shares the ancestors, so a Dict whose declared type holds the Dict itself is the cycle it is
    (a damaged file made one: each parameter's fresh encoder met it anew until the stack ran out)."""

    inside: dict[int, TreePath] | None = None


_NEST = _Nest()


class _Encoder:
    def __init__(
        self, on_array: OnArray, table: LayoutTable, sharing: Sharing, inside: dict[int, TreePath]
    ) -> None:
        self.on_array = on_array
        self.table = table
        self.sharing = sharing
        self.inside = inside

    def node(self, value: Any, path: TreePath) -> dict[str, Any]:
        """``inside``: the mutable containers being encoded (id -> path), ancestors of ``value``. A
        file's objects may refer to each other in a cycle (JLD2 stores references: a solution
        object that holds itself); a tree cannot, and following it would never end. NamedTuples and
        tuples are immutable once built, so every cycle runs through one of the others. An object
        met before, and done, is a ``same`` node (:class:`Sharing`)."""
        if len(path) > TREE_DEPTH:
            raise _too_deep(path)
        first = self.sharing.first
        if is_numeric_array(value):  # (the common leaf: its own short path)
            seen = first.get(id(value))
            if seen is not None and seen[1] is value:
                return self.again(seen[0])
            node = dict(self.on_array(value, path))
            node["t"] = "array"
            first[id(value)] = (node, value)
            return node
        if isinstance(value, NamedTuple):
            return {"t": "nt", "f": [[k, self.node(v, (*path, k))] for k, v in value.items()]}
        if isinstance(value, tuple):
            return {"t": "tuple", "v": [self.node(v, (*path, i)) for i, v in enumerate(value, 1)]}
        if isinstance(value, Closure) and value.captures:
            # What it is in Julia, and what the JLD2 writer writes: an instance of its struct
            # type, fields the captured values (a trained `downsample`), read back as that
            # struct (one view per closure: a closure met twice is a `same` node).
            value = closure_as_struct(value, path)
        if not isinstance(value, (list, dict, JuliaStruct, JuliaArray)):
            return _encode_scalar(value, path)
        if id(value) in self.inside:
            raise ConversionError(
                f"the value refers to itself (a cycle back to {format_path(self.inside[id(value)])}); "
                "this format stores a tree of values and cannot hold it (JLD2 can: convert to .jld2)",
                path=path,
            )
        seen = first.get(id(value))
        if seen is not None and seen[1] is value:
            return self.again(seen[0])
        self.inside[id(value)] = path
        try:
            node = self.mutable(value, path)
        finally:
            del self.inside[id(value)]
        first[id(value)] = (node, value)
        return node

    def again(self, first: dict[str, Any]) -> dict[str, Any]:
        """The ``same`` node of an object met before (its first node given its ``k`` now)."""
        if "k" not in first:
            first["k"] = self.sharing.count
            self.sharing.count += 1
        return {"t": "same", "k": first["k"]}

    def mutable(self, value: Any, path: TreePath) -> dict[str, Any]:
        if isinstance(value, list):
            return {"t": "list", "v": [self.node(v, (*path, i)) for i, v in enumerate(value, 1)]}
        if isinstance(value, dict):
            tag = "group" if isinstance(value, Group) else "dict"
            items = [[encode(k, _no_arrays, path), self.node(v, (*path, str(k)))] for k, v in value.items()]
            out: dict[str, Any] = {"t": tag, "items": items}
            if isinstance(value, JuliaDict) and value.julia_type is not None:
                out["type"] = encode_type(
                    value.julia_type, path
                )  # (declared: the entries alone may not tell)
            return out
        if isinstance(value, JuliaStruct):
            if value.type.basename in GPU_ARRAYS:  # (said by convert; noted here, no walk of its own)
                self.sharing.devices.append(path)
            fields = [[k, self.node(v, (*path, k))] for k, v in value.fields.items()]
            node: dict[str, Any] = {"t": "struct", "type": encode_type(value.type, path), "f": fields}
            layout = self.table.index(value.layout)
            if layout is not None:
                node["lay"] = layout
            if value.mutable:
                node["mut"] = True
            return node
        elements = [self.node(v, (*path, i)) for i, v in enumerate(value, 1)]  # JuliaArray
        return {
            "t": "jarray",
            "eltype": encode_type(value.eltype, path),
            "shape": list(value.shape),
            "v": elements,
        }


def _no_arrays(value: Any, path: TreePath) -> dict[str, Any]:
    raise ConversionError("an array cannot be a dict key here", path=path)


def _encode_scalar(value: Any, path: TreePath) -> dict[str, Any]:
    if value is None:
        return {"t": "nothing"}
    if isinstance(value, Missing):
        return {"t": "missing"}
    if isinstance(value, Undef):
        return {"t": "undef"}
    if isinstance(value, bool):
        return {"t": "bool", "v": value}
    if isinstance(value, Int128):
        return {"t": "int128", "v": str(int(value))}
    if isinstance(value, UInt128):
        return {"t": "uint128", "v": str(int(value))}
    if isinstance(value, BigInt):
        return {"t": "bigint", "v": hex(value), "name": value.julia_name}
    if isinstance(value, BigFloat):
        return {"t": "bigfloat", "v": value.text, "name": value.julia_name}
    if isinstance(value, np.generic):
        dtype = np.dtype(value.dtype).newbyteorder("<")
        if dtype.newbyteorder("=") not in _DTYPE_TO_JULIA:
            raise ConversionError(f"numpy scalar of dtype {value.dtype} has no Julia type", path=path)
        raw = np.asarray(value, dtype=dtype).tobytes()
        return {"t": "num", "dtype": value.dtype.name, "hex": raw.hex()}
    if isinstance(value, int):
        return {"t": "int", "v": int(value)}
    if isinstance(value, float):
        return {"t": "float", "hex": value.hex()}
    if isinstance(value, complex):
        return {"t": "complex", "re": value.real.hex(), "im": value.imag.hex()}
    if isinstance(value, Symbol):
        return {"t": "sym", "v": str(value)}
    if isinstance(value, str):
        return {"t": "str", "v": value}
    if isinstance(value, Singleton):  # (a closure here captured nothing: its type is all of it)
        return {"t": "singleton", "type": _type_at(value.type, path)}
    if isinstance(value, JuliaBits):
        return {"t": "bits", "type": _type_at(value.type, path), "hex": value.data.hex()}
    if isinstance(value, JuliaType):
        return _type_at(value, path)
    raise ConversionError(f"{type(value).__name__} is not a value treexchange can store", path=path)


def _type_at(t: JuliaType, path: TreePath) -> dict[str, Any]:
    try:
        return encode_type(t, path)
    except LimitError as err:
        err.with_context(path=path)
        raise


def encode_type(t: JuliaType, path: TreePath = ()) -> dict[str, Any]:
    """A Julia type as JSON, parameters included (exact: no re-parsing of printed text).

    Raises:
        LimitError: its text would be longer than ``Limits().max_type_chars`` (what a JLD2 writer
            refuses too): a type whose parameters share one type at many places (``Tuple{T,T}``
            40 levels deep) is one object per level, but its JSON would name every place.
    """
    t.qualified()  # (the bound, in time linear in the distinct types; the text is not kept)
    with stack_room():
        return _type_node(t, path)


def _type_node(t: JuliaType, path: TreePath) -> dict[str, Any]:
    """``encode_type`` below its top: a parameter's text is part of the top's, so it is bounded
    there. (Checking it again at every level took time cubic in the depth: each level of a
    ``Dict`` of ``Dict``s 500 deep stores its type, and ran for minutes.)"""
    # (a value parameter is encoded at the place of the value whose type this is: the depth of
    # the tree below it counts from there)
    params = [
        _type_node(p, path) if isinstance(p, JuliaType) else encode(p, _no_arrays, path) for p in t.params
    ]
    return {"t": "type", "name": t.name, "p": params}


def decode(node: Any, get_array: GetArray, path: TreePath = (), sharing: Sharing | None = None) -> Any:
    """The value a skeleton stands for; ``get_array`` supplies each stored array.

    Example:
        >>> arrays = {"w": np.arange(3.0)}
        >>> skeleton = encode(NamedTuple(w=arrays["w"], σ=()), lambda a, p: {"name": "w"})
        >>> decode(skeleton, lambda node, path: arrays[node["name"]])
        NamedTuple(w=array([0., 1., 2.]), σ=())
    """
    layouts = None
    if isinstance(node, dict) and "L" in node:
        try:
            layouts = LayoutReader(node["L"], decode_type)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            if isinstance(err, FormatError):
                raise
            raise FormatError(f"tree metadata: bad struct layout table ({err})", path=path) from None
    decoder = _Decoder(get_array, layouts, Sharing() if sharing is None else sharing)
    if _NODES.depth:  # (a Dict key or a type's parameter, inside a decode: the room is that one's)
        return decoder.node(node, path)
    with stack_room():
        return decoder.node(node, path)


class _Nodes(threading.local):
    depth = 0  # nodes being decoded, nested, in this thread: keys and type parameters counted


_NODES = _Nodes()
NODE_DEPTH = TREE_DEPTH + type_depth(DEFAULT_LIMITS)
"""Nodes a decode may nest: the tree's levels and a type's parameters (whose nodes do not
lengthen the path), a few Python frames each within :func:`stack_room`."""


def document_roots(doc: Any, where: str) -> list[tuple[str, Any]]:
    """The ``(name, node)`` roots of a tree metadata document (``{"format", "version", "roots"}``)
    read from a file, checked: a document of another program, of a newer version, or damaged
    (roots that are not name-node pairs) is a FormatError / UnsupportedError naming ``where``.

    Example:
        >>> document_roots({"format": TREE_FORMAT, "version": 1, "roots": [["x", {"t": "nothing"}]]}, "f")
        [('x', {'t': 'nothing'})]
        >>> document_roots({"format": TREE_FORMAT, "version": 1, "roots": [["x"]]}, "f")
        Traceback (most recent call last):
        ...
        treexchange._errors.FormatError: f: tree metadata: root 1 is not a [name, node] pair
    """
    if not (
        isinstance(doc, dict) and doc.get("format") == TREE_FORMAT and isinstance(doc.get("roots"), list)
    ):
        raise FormatError(f"{where}: unknown treexchange metadata")
    version = doc.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise FormatError(f"{where}: tree metadata version {version!r} is not a number")
    if version > TREE_VERSION:
        raise UnsupportedError(f"{where}: tree metadata version {version} is newer than this")
    roots: list[tuple[str, Any]] = []
    for i, pair in enumerate(doc["roots"], 1):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise FormatError(f"{where}: tree metadata: root {i} is not a [name, node] pair")
        roots.append((pair[0], pair[1]))
    return roots


class _Decoder:
    def __init__(self, get_array: GetArray, layouts: LayoutReader | None, sharing: Sharing) -> None:
        self.get_array = get_array
        self.layouts = layouts
        self.sharing = sharing

    def node(self, node: Any, path: TreePath) -> Any:
        if len(path) > TREE_DEPTH:
            raise _too_deep(path)
        depth = _NODES.depth + 1
        if depth > NODE_DEPTH:
            raise LimitError(
                f"tree metadata nested deeper than {NODE_DEPTH} nodes (a tree's levels and its types' "
                "parameters)",
                path=path,
            )
        _NODES.depth = depth
        try:
            return self._node(node, path)
        finally:
            _NODES.depth = depth - 1

    def _node(self, node: Any, path: TreePath) -> Any:
        try:
            tag = node["t"]
        except (TypeError, KeyError):
            raise FormatError("tree metadata: a node without a tag", path=path) from None
        try:
            if tag == "same":
                return self.same(node, path)
            value = self.decode(tag, node, path)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            if isinstance(err, FormatError):
                raise
            raise FormatError(f"tree metadata: bad {tag!r} node ({err})", path=path) from None
        if "k" in node:
            self.sharing.decoded[_shared_key(node, path)] = value
        return value

    def same(self, node: dict[str, Any], path: TreePath) -> Any:
        k = _shared_key(node, path)
        if k not in self.sharing.decoded:
            raise FormatError(f"tree metadata: 'same' node {k} before the object it names", path=path)
        value = self.sharing.decoded[k]
        self.sharing.expansion.again(value, path)
        return value

    def decode(self, tag: str, node: dict[str, Any], path: TreePath) -> Any:
        if tag == "array":
            return self.get_array(node, path)
        if tag == "nt":
            return NamedTuple((k, self.node(v, (*path, k))) for k, v in _named(node, path))
        if tag in ("tuple", "list"):
            items = [self.node(v, (*path, i)) for i, v in enumerate(node["v"], 1)]
            return tuple(items) if tag == "tuple" else items
        if tag in ("dict", "group"):
            out: dict[Any, Any] = Group() if tag == "group" else {}
            if tag == "dict" and "type" in node:
                out = JuliaDict()
                out.julia_type = decode_type(node["type"])
            for k, v in node["items"]:
                key = decode(k, self.get_array, path)
                out[key] = self.node(v, (*path, str(key)))
            return out
        if tag == "struct":
            fields = [(k, self.node(v, (*path, k))) for k, v in _named(node, path)]
            layout = None
            if "lay" in node:
                if self.layouts is None:
                    raise FormatError("tree metadata: a struct layout without a layout table", path=path)
                layout = self.layouts.get(node["lay"])
            mutable = node.get("mut") is True
            return JuliaStruct(decode_type(node["type"]), fields, layout=layout, mutable=mutable)
        if tag == "jarray":
            items = [self.node(v, (*path, i)) for i, v in enumerate(node["v"], 1)]
            data = np.empty(len(items), dtype=object)
            data[:] = items
            return JuliaArray(decode_type(node["eltype"]), data.reshape(tuple(node["shape"]), order="F"))
        return _decode_scalar(tag, node, path)


def _shared_key(node: dict[str, Any], path: TreePath) -> int:
    k = node["k"]
    if not isinstance(k, int) or isinstance(k, bool):
        raise FormatError(f"tree metadata: a shared object's key {k!r} is not a number", path=path)
    return k


def _named(node: dict[str, Any], path: TreePath) -> list[tuple[str, Any]]:
    """A NamedTuple's or struct's ``f``: ``[name, node]`` pairs whose names are text (a file's
    names become HDF5 names and Python keys: a number or a list there is a damaged document)."""
    pairs = node["f"]
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in pairs
    ):
        raise FormatError("tree metadata: fields that are not [name, node] pairs", path=path)
    return [(k, v) for k, v in pairs]


def _decode_scalar(tag: str, node: dict[str, Any], path: TreePath) -> Any:
    if tag == "nothing":
        return None
    if tag == "missing":
        return MISSING
    if tag == "undef":
        return UNDEF
    if tag == "bool":
        return bool(node["v"])
    if tag == "int128":
        return Int128(int(node["v"]))
    if tag == "uint128":
        return UInt128(int(node["v"]))
    if tag == "bigint":
        try:
            return BigInt(int(node["v"], 16), str(node["name"]))
        except (TypeError, ValueError):
            raise FormatError(f"malformed bigint node {str(node)[:60]!r}", path=path) from None
    if tag == "bigfloat":
        try:
            return BigFloat(str(node["v"]), str(node["name"]))
        except (TypeError, ValueError):
            raise FormatError(f"malformed bigfloat node {str(node)[:60]!r}", path=path) from None
    if tag == "num":
        dtype = DTYPES[node["dtype"]]
        return np.frombuffer(bytes.fromhex(node["hex"]), dtype=dtype.newbyteorder("<"))[0].astype(dtype)
    if tag == "int":
        return int(node["v"])
    if tag == "float":
        return float.fromhex(node["hex"])
    if tag == "complex":
        return complex(float.fromhex(node["re"]), float.fromhex(node["im"]))
    if tag == "str":
        return str(node["v"])
    if tag == "sym":
        return Symbol(node["v"])
    if tag == "singleton":
        return Singleton(decode_type(node["type"]))
    if tag == "bits":
        return JuliaBits(decode_type(node["type"]), bytes.fromhex(node["hex"]))
    if tag == "type":
        return decode_type(node)
    raise FormatError(f"tree metadata: unknown node tag {tag!r}", path=path)


def decode_type(node: dict[str, Any]) -> JuliaType:
    """The inverse of :func:`encode_type`."""
    if not isinstance(node, dict) or node.get("t") != "type" or not isinstance(node.get("name"), str):
        raise FormatError("tree metadata: expected a Julia type")
    if not isinstance(node.get("p"), list):
        raise FormatError(f"tree metadata: the parameters of type {node['name']!r} are not a list")
    return JuliaType(node["name"], tuple(decode(p, _no_array_in_type) for p in node["p"]))


def _no_array_in_type(node: dict[str, Any], path: TreePath) -> Any:
    raise FormatError("tree metadata: an array inside a Julia type")


def array_nodes(
    node: Any, path: TreePath = (), *, named: bool = False
) -> list[tuple[TreePath, dict[str, Any]]]:
    """Every ``array`` node of a skeleton with its tree path, in tree order (nothing is read);
    each has a known ``dtype`` and a ``shape`` of sizes, and with ``named`` a ``name`` (str), or
    the document is refused (FormatError): the nodes come from a file."""
    out: list[tuple[TreePath, dict[str, Any]]] = []

    def walk(n: Any, p: TreePath) -> None:
        if len(p) > TREE_DEPTH:
            raise _too_deep(p)
        tag = n.get("t") if isinstance(n, dict) else None
        if tag == "array":
            out.append((p, n))
        elif tag in ("nt", "struct"):
            for k, v in _named(n, p):  # (names are text: they become the paths' segments)
                walk(v, (*p, k))
        elif tag in ("tuple", "list", "jarray"):
            for i, v in enumerate(n["v"], 1):
                walk(v, (*p, i))
        elif tag in ("dict", "group"):
            for k, v in n["items"]:
                walk(v, (*p, _key_segment(k)))

    try:
        with stack_room():
            walk(node, path)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        if isinstance(err, FormatError):
            raise
        raise FormatError(f"tree metadata: bad node ({err})", path=path) from None
    for p, n in out:  # (what the listing and the readers take from each array node)
        dtype = n.get("dtype")
        if not (
            isinstance(n.get("shape"), list)
            and _is_dims(n["shape"])
            and isinstance(dtype, str)
            and dtype in DTYPES
        ):
            raise FormatError("tree metadata: an array node without a known dtype and shape", path=p)
        if named and not isinstance(n.get("name"), str):
            raise FormatError("tree metadata: an array node without the name of its tensor", path=p)
    return out


def some_names(names: Sequence[str], shown: int = 5) -> str:
    """Names for a message, the first ``shown`` of them and how many more.

    Example:
        >>> some_names(["a", "b", "c", "d", "e", "f", "g"])
        "'a', 'b', 'c', 'd', 'e' and 2 more"
    """
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(repr(name) for name in names[:shown]) + more


def _is_dims(shape: list[Any]) -> bool:
    return all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)


def _key_segment(key_node: dict[str, Any]) -> str:
    try:
        return str(_decode_scalar(key_node["t"], key_node, ()))
    except (FormatError, KeyError, TypeError, ValueError):
        return "?"


def julia_array_type(dtype: np.dtype, ndim: int) -> str:
    """How Julia prints the type of a numeric array (``Array{Float32, 2}``), for readers of the
    metadata and for ``--dry-run``."""
    return str(JuliaType("Core.Array", (_DTYPE_TO_JULIA[np.dtype(dtype).newbyteorder("=")], np.int64(ndim))))


def segments(path: Sequence[PathSegment]) -> list[PathSegment]:
    """A tree path as a JSON list (ints stay 1-based, as in ``inspect --json``)."""
    return list(path)


def refuse_lone_surrogates(text: str, document: dict[str, Any]) -> bytes:
    """``text`` (the JSON of ``document``, a tree metadata document) in UTF-8; when a name or a
    text in the tree holds a lone surrogate (no UTF-8 form: a name read from a damaged BSON
    file, a JSON ``"\\udcff"``), a ConversionError at that place in the tree, before anything is
    written. The search runs only then: a valid document costs one encode.

    Example:
        >>> import json
        >>> doc = {"roots": [["st", encode(NamedTuple([("w\\udcff", 1.0)]), lambda a, p: {})]]}
        >>> refuse_lone_surrogates(json.dumps(doc, ensure_ascii=False), doc)
        Traceback (most recent call last):
        ...
        treexchange._errors.ConversionError: text 'w\\udcff' holds a lone surrogate, ... (at st['w\\udcff'])
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        found = None
        with stack_room():
            for name, node in document.get("roots", []):
                found = _surrogate_in(name, (name,)) or _surrogate_node(node, (name,))
                if found:
                    break
        path, bad = found or ((), text[:200])  # (not found in the tree: a part of the text)
        raise ConversionError(
            f"text {bad!r} holds a lone surrogate, which has no UTF-8 form (this format stores names "
            "and text as UTF-8)",
            path=path,
        ) from None


def _surrogate_in(text: Any, path: TreePath) -> tuple[TreePath, str] | None:
    if not isinstance(text, str):
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return path, text
    return None


def _surrogate_node(node: Any, path: TreePath) -> tuple[TreePath, str] | None:
    """Where in the tree the first text without a UTF-8 form is (a name, a key, a str or
    Symbol, a type's name), following the nodes as :func:`_encode` makes them."""
    if isinstance(node, list):
        for item in node:
            if found := _surrogate_node(item, path):
                return found
        return None
    if not isinstance(node, dict):
        return _surrogate_in(node, path)
    tag = node.get("t")
    if tag in ("nt", "struct"):
        for key, child in node.get("f", []):
            found = _surrogate_in(key, (*path, key)) or _surrogate_node(child, (*path, key))
            if found:
                return found
    elif tag in ("dict", "group"):
        for key_node, child in node.get("items", []):
            key = key_node.get("v") if isinstance(key_node, dict) else None
            step = key if isinstance(key, str) else str(key)
            found = _surrogate_node(key_node, (*path, step)) or _surrogate_node(child, (*path, step))
            if found:
                return found
    elif tag in ("tuple", "list", "jarray"):
        for i, child in enumerate(node.get("v", []), 1):
            if found := _surrogate_node(child, (*path, i)):
                return found
    for key, value in node.items():  # a str's or Symbol's text, a type's name and parameters
        if key not in ("f", "items", "v") or tag in ("str", "sym"):
            if found := _surrogate_node(value, path):
                return found
    return None
