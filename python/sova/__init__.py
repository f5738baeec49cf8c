"""sova — a stream-ordered CUDA allocator on the VMM API.

``import sova`` works on any machine: the library is loaded, and a GPU or
driver is needed only when a pool is made (then a missing one raises
sova.SovaError saying so). ``sova.torch`` makes sova PyTorch's CUDA
allocator; ``sova.Pool`` is one pool on sova's C API. docs/python.md has the API.
"""
from ._capi import SovaError
from ._options import PoolOptions
from .pool import Pool

__version__ = "0.1.0"
__all__ = ["SovaError", "PoolOptions", "Pool", "__version__"]
