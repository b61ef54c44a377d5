"""The JAX bridge: PyTrees (JAX, Equinox, Flax, plain Python) <-> Julia state (value-model values).

Importing this package does not import JAX or Equinox; they are imported inside the functions that
need them (``import treexchange`` must stay cheap and usable without JAX).
"""

from ._api import restore as restore
from ._report import RestoreReport as RestoreReport, RestoreWarning as RestoreWarning
from ._to_julia import to_julia as to_julia
