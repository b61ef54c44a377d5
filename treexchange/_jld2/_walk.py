"""``leaves()`` of a JLD2 file's nodes: every leaf's path and node, with per-leaf work in bulk.

What :func:`treexchange._nodeproto.walk_leaves` gives for any reader's nodes (the same leaves, in
the same order, containers descended into once each), made for the shapes real checkpoints have:

* a model's layers (a vector of references to small structs / NamedTuples, read in bulk by
  ``Reader.prime``): each layer's array fields become leaves straight from the layer's bytes,
  with no node made for the layer (a node per layer kept alive by its vector is what a walk
  through ``node[i]`` pays, and what makes Python's collector run);
* the fields of a NamedTuple / struct, and the values of a Dict, that are arrays described
  already (alike to a described header): an array node made in a few stores, no call per leaf;
* anything else: the child nodes ``children()`` gives (the same objects, cached the same way).

A leaf's path is given whole (a tuple), as the walk builds it anyway: its node keeps it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, cast

from .._errors import TreePath
from .._nodeproto import child_items, is_container, walk_leaves
from ._nodes import (
    _GROUP_MASK,
    _OFFSET_SHIFT,
    ArrayNode,
    CompoundNode,
    ContainerNode,
    DelegateNode,
    DictNode,
    Group,
    Node,
    RefVectorNode,
)
from ._plans import CompoundPlan, ReferencePlan
from ._reader import DatasetInfo, Reader

_unpack_u64 = struct.Struct("<Q").unpack_from

AnyNode = Node | Group


class _Passed:
    """A layer :func:`_vector_items` lists from its bytes, given to :func:`walk_leaves` in its
    place: counted toward the node budget as the layer's node would be (a LimitError names its
    path), and not descended into (its address is in ``seen`` already)."""

    __slots__ = ("object_address", "path")

    def __init__(self) -> None:
        self.path: TreePath = ()
        self.object_address = 0


_Item = tuple[TreePath, AnyNode] | AnyNode | _Passed
"""What a container's items give: ``(path, leaf)``, a container to descend into, or a layer
passed (:class:`_Passed`)."""


def jld2_leaves(root: AnyNode, budget: int) -> Iterator[tuple[TreePath, AnyNode]]:
    """``(path, node)`` of every leaf at or below ``root``: :func:`walk_leaves` with the items
    of this module (see its docstring).

    Raises:
        LimitError: more than ``budget`` leaves and containers visited.
        ValueError: the file was closed while walking it.
    """
    reader: Reader = root._reader

    def check() -> None:
        if reader.closed:
            reader._check_open()

    return walk_leaves(root, budget, _items, check)  # type: ignore[arg-type,return-value]


def _items(node: AnyNode, seen: set[int]) -> Iterator[_Item]:
    """The children of container ``node``: leaves as ``(path, node)``, containers as nodes."""
    t = type(node)
    if t is DelegateNode:
        target = node._target  # type: ignore[union-attr]
        if target.path == node.path:  # (its children are the written form's, at the same paths)
            t, node = type(target), target
    if t is CompoundNode:
        return _compound_items(node)  # type: ignore[arg-type]
    if t is RefVectorNode:
        return _vector_items(node, seen)  # type: ignore[arg-type]
    if t is DictNode:
        return _dict_items(node)  # type: ignore[arg-type]
    return child_items(node, seen)  # type: ignore[return-value]


def _array_leaf(reader: Reader, path: TreePath, address: int) -> ArrayNode | None:
    """The node of the numeric array dataset at ``address`` when its header is described
    already (alike to a described one: ``Reader.describe``); None when it is not such an array,
    or not known yet (then the usual way makes it)."""
    h5 = reader.h5
    info: DatasetInfo | None = h5._vouched.get(address)  # type: ignore[assignment]
    if info is None:
        info = h5._objects.get(address)  # type: ignore[assignment]
    if info is None or info.value_kind is None or info.dtype is None:
        return None
    return _leaf(reader, path, info, address)


def _leaf(reader: Reader, path: TreePath, info: DatasetInfo, address: int) -> ArrayNode:
    """The node of the array dataset at ``address`` described by ``info`` (its header, or one
    alike to it), made in a few stores."""
    leaf = ArrayNode()
    leaf._reader = reader
    leaf._up = path
    leaf._seg = None
    leaf.julia_type = info.julia_type
    leaf.shape = info.shape  # type: ignore[assignment]  # (an array's: a tuple)
    leaf.dtype = info.dtype  # type: ignore[assignment]
    leaf._address = address
    return leaf


def _compound_items(node: CompoundNode) -> Iterator[_Item]:
    """A NamedTuple's / struct's / Tuple's fields: arrays stored by reference straight from
    the bytes, every other field as its node."""
    reader, path = node._reader, node.path
    plan, buf, off = node._plan, node._buf, node._off
    fields = plan.fields
    short = len(path) < reader.max_path  # (a leaf's path within the bound: else its node raises)
    for i, (seg, _) in enumerate(plan.entries):
        f = fields[i]
        if short and type(f.plan) is ReferencePlan:
            leaf_path = (*path, seg)
            leaf = _array_leaf(reader, leaf_path, _unpack_u64(buf, off + f.offset)[0])
            if leaf is not None:
                yield leaf_path, leaf
                continue
        yield _item(node._child(i))


def _vector_items(vector: RefVectorNode, seen: set[int]) -> Iterator[_Item]:
    """A vector of references' elements; one that ``Reader.prime`` read as a small struct (a
    model's layer) and that has no node yet is walked from its bytes, with no node made: each
    field that is a described array becomes a leaf at once (its header looked up inline: a
    model's walk makes a leaf per array here), any other field is reached through the element's
    node."""
    reader, path = vector._reader, vector.path
    addresses = vector._prime()
    elements, groups, objects = reader._elements, reader._element_groups, reader.h5._objects
    vouched = reader.h5._vouched
    cache = vector._cache
    short = len(path) + 1 < reader.max_path  # (a layer's fields' paths within the bound)
    group = -1
    fields: list[tuple[int, Any, int]] = []  # (position, segment, offset of a reference or -1)
    passed = _Passed()  # (one for the vector: the walk looks at it before the next is given)
    for j, address in enumerate(addresses):
        found = elements.get(address) if short else None
        if found is not None and j not in cache and address not in objects:
            if found & _GROUP_MASK != group:  # (a vector's elements: mostly one group)
                group = found & _GROUP_MASK
                info, blob = groups[group]
                plan = info.plan
                fields = _field_offsets(plan) if type(plan) is CompoundPlan else []
            if fields:
                layer_path = (*path, j + 1)
                # the layer counted as the walk counts each container it meets (its budget)
                passed.path, passed.object_address = layer_path, address
                if address in seen:
                    yield passed
                    continue  # the same struct met before (shared, or a cycle): listed there
                seen.add(address)
                yield passed
                off = found >> _OFFSET_SHIFT
                for i, seg, at in fields:
                    if at >= 0:
                        ref = _unpack_u64(blob, off + at)[0]
                        described: DatasetInfo | None = vouched.get(ref)  # type: ignore[assignment]
                        if described is None:
                            described = objects.get(ref)  # type: ignore[assignment]
                        if (
                            described is not None
                            and described.value_kind is not None
                            and described.dtype is not None
                        ):
                            # what _leaf makes, inline: a model's walk makes a node per
                            # array here, and a call per leaf cost 4 % of the walk
                            leaf = ArrayNode()
                            leaf._reader = reader
                            leaf._up = leaf_path = (*layer_path, seg)
                            leaf._seg = None
                            leaf.julia_type = described.julia_type
                            leaf.shape, leaf.dtype = described.shape, described.dtype  # type: ignore[assignment]
                            leaf._address = ref
                            yield leaf_path, leaf
                            continue
                    layer = vector._child(j)  # (made once, then kept by the vector)
                    yield _item(cast(ContainerNode, layer)._child(i))
                continue
        yield _item(vector._child(j))


def _field_offsets(plan: CompoundPlan) -> list[tuple[int, Any, int]]:
    """Each field's position, path segment and the offset of its reference (-1: not stored
    by reference)."""
    return [
        (i, seg, f.offset if type(f.plan) is ReferencePlan else -1)
        for i, ((seg, _), f) in enumerate(zip(plan.entries, plan.fields))
    ]


def _item(child: AnyNode) -> _Item:
    return child if is_container(child) else (child.path, child)


def _dict_items(node: DictNode) -> Iterator[_Item]:
    """A Dict's values: those that are described arrays straight from the references its
    Pairs hold (checked in bulk on the first look: ``DictNode._vouch_values``)."""
    reader, path = node._reader, node.path
    if not node._vouched:
        node._vouched = True
        node._vouch_values()
    refs, segments = node._refs, node._segments
    arrays = node._arrays if node._leaf_path_ok else None  # (else a value's node raises)
    for i in range(len(segments)):
        info = arrays[i] if arrays is not None else None
        if info is not None:
            leaf_path = (*path, segments[i])
            yield leaf_path, _leaf(reader, leaf_path, info, refs[i])  # type: ignore[index]
            continue
        yield _item(node._child(i))
