"""Other formats: safetensors files, orbax checkpoints (and, with portcore's layer rules, PyTorch).

Every converter here shares one description of a value tree (:mod:`._treejson`): the tree's
structure, names, Julia types, ``()``/``nothing`` markers and non-array leaves as JSON, with each
numeric array replaced by a reference to a tensor stored by the other format. Arrays move one at a
time (see :mod:`._source`), so converting never holds a second copy of a whole model.

None of these modules is imported by ``import treexchange``; each imports its format's package
(``safetensors``, ``orbax-checkpoint``, ``torch``) only when it is used.
"""

from ._convert import convert_formats as convert_formats
from ._orbax import load_orbax as load_orbax, save_orbax as save_orbax
from ._safetensors import load_safetensors as load_safetensors, save_safetensors as save_safetensors
from ._source import lazy_tree as lazy_tree

__all__ = ["convert_formats", "lazy_tree", "load_orbax", "load_safetensors", "save_orbax", "save_safetensors"]
