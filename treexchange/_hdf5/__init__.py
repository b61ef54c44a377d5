"""A pure-Python (numpy) reader of the HDF5 structures JLD2 files are made of.

Read-only, memory-mapped, bounds-checked: bad input raises :class:`treexchange.FormatError` with the
absolute file offset. The data classes live in :mod:`._model`; parsing in the other modules.
"""

from ._file import HDF5File as HDF5File
from ._model import Attribute as Attribute
from ._model import Dataspace as Dataspace
from ._model import Filter as Filter
from ._model import H5Class as H5Class
from ._model import H5Type as H5Type
from ._model import Layout as Layout
from ._model import Member as Member
from ._model import Message as Message
from ._objectheader import ObjectHeader as ObjectHeader
