"""BSON.jl files (``BSON.@save "model.bson" model``): the codec, layer 1 beside ``_jld2``.

Map:

* :mod:`._container`: the BSON container (bsonspec.org), a small bounded parser over the bytes;
  why our own parser rather than a library is in its docstring;
* :mod:`._julia`: BSON.jl's tagged documents -> the value model (the table of tags is in its
  docstring), backrefs, Tracker arrays, closures, :func:`is_device_array`;
* :mod:`._document`: an opened file (memory map, index of the top-level names and of
  ``_backrefs``), :func:`sniff` (is this BSON?).

The node protocol over these values (``treexchange.open`` on a ``.bson`` file) is in the reader
facade's :mod:`treexchange._bsonfile` (layer 2).
"""

from ._document import BACKREFS, BsonDocument, sniff
from ._julia import Session, is_device_array

__all__ = ["BACKREFS", "BsonDocument", "Session", "is_device_array", "sniff"]
