"""Group membership and dense attributes: compact link messages, symbol tables, dense storage."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import FormatError, UnsupportedError
from . import _messages as m
from ._btree1 import group_entries
from ._btree2 import records
from ._cursor import Cursor
from ._fractalheap import FractalHeap
from ._model import Attribute

if TYPE_CHECKING:
    from ._file import HDF5File
    from ._objectheader import ObjectHeader

_LINK_NAME_RECORDS = 5
_LINK_ORDER_RECORDS = 6
_ATTR_NAME_RECORDS = 8
_ATTR_ORDER_RECORDS = 9


def group_links(f: HDF5File, obj: ObjectHeader) -> list[m.Link]:
    """Every link of the group ``obj`` in link order (see :meth:`ObjectHeader.links`)."""
    out: list[m.Link] = []
    st = obj.find(m.SYMBOL_TABLE)
    if st is not None:
        btree, heap = m.parse_symbol_table(obj.cursor(st), f.base)
        for raw, addr in group_entries(f._cursor(0), btree, heap, f.base, f.limits):
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise FormatError("symbol table name is not valid UTF-8", offset=heap) from None
            out.append(m.Link(name, 0, addr))
        return _unique(out, obj)
    compact = [m.parse_link(obj.cursor(msg)) for msg in obj.find_all(m.LINK)]
    if compact and all(lk.creation_order is not None for lk in compact):
        compact.sort(key=lambda lk: lk.creation_order or 0)
    out.extend(compact)
    info_msg = obj.find(m.LINK_INFO)
    if info_msg is not None:
        info = m.parse_link_info(obj.cursor(info_msg), f.base)
        if info.heap_address is not None:
            out.extend(_dense_links(f, info))
    return _unique(out, obj)


def _unique(links: list[m.Link], obj: ObjectHeader) -> list[m.Link]:
    names: set[str] = set()
    for lk in links:
        if lk.name in names:
            raise FormatError(f"group has two links named {lk.name!r}", offset=obj.offset)
        names.add(lk.name)
    return links


def _dense_index(
    f: HDF5File, info: m.DenseStorageInfo, what: str, order_records: int, name_records: int
) -> tuple[FractalHeap, list[memoryview], bool, int]:
    """Open the fractal heap and read the B-tree index of dense links or attributes: the
    creation-order index when there is one, else the name index (hash order)."""
    assert info.heap_address is not None
    c = f._cursor(0)
    heap = FractalHeap(c, info.heap_address, f.base, verify=f.verify_checksums, limits=f.limits)
    by_order = info.order_index_address is not None
    index = info.order_index_address if by_order else info.name_index_address
    if index is None:
        raise FormatError(f"dense {what} storage without a name index", offset=info.heap_address)
    header, recs = records(c, index, f.base, f.limits, verify=f.verify_checksums)
    expected = order_records if by_order else name_records
    if header.type != expected:
        raise FormatError(
            f"{what} index B-tree has record type {header.type}, expected {expected}", offset=index
        )
    return heap, recs, by_order, index


def _dense_links(f: HDF5File, info: m.LinkInfo) -> list[m.Link]:
    heap, recs, by_order, _ = _dense_index(f, info, "link", _LINK_ORDER_RECORDS, _LINK_NAME_RECORDS)
    c = f._cursor(0)
    skip = 8 if by_order else 4  # creation order (u64) or name hash (u32) precedes the heap ID
    links = []
    for rec in recs:
        body = heap.get(rec[skip : skip + heap.id_len])
        links.append(m.parse_link(Cursor(body, 0, offset_size=c.offset_size, length_size=c.length_size)))
    if not by_order:
        # the name index is in hash order; HDF5 (and h5py) list such groups by name
        links.sort(key=lambda lk: lk.name.encode("utf-8"))
    return links


def dense_attributes(f: HDF5File, info: m.AttributeInfo) -> dict[str, Attribute]:
    """Attributes kept in a fractal heap: creation order when indexed, else by name."""
    if info.heap_address is None:
        return {}
    heap, recs, by_order, index = _dense_index(f, info, "attribute", _ATTR_ORDER_RECORDS, _ATTR_NAME_RECORDS)
    attrs = []
    for rec in recs:
        if rec[8] & m.MSG_FLAG_SHARED:
            raise UnsupportedError("shared attribute messages are not supported", offset=index)
        start, body = heap.locate(rec[:8])
        # The heap object is the attribute message body; reading it in place keeps the
        # attribute's data_offset absolute.
        ac = f._cursor(start, start + len(body)) if start is not None else Cursor(body, 0)
        attrs.append(m.parse_attribute(ac, f._committed_type, f.limits, f.attribute_forms, f.known_compounds))
    if not by_order:
        attrs.sort(key=lambda a: a.name.encode("utf-8"))
    return {a.name: a for a in attrs}
