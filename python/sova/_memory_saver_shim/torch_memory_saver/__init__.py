"""A ``torch_memory_saver`` package that is sova's drop-in (sova.memory_saver):
put this package's parent directory first on PYTHONPATH
(``PYTHONPATH="$(python -m sova.memory_saver)"``) and an unmodified program's
``from torch_memory_saver import torch_memory_saver`` gets sova's. Only the
package's public names are here: torch_memory_saver, TorchMemorySaver,
configure_subprocess."""
from sova.memory_saver import TorchMemorySaver, configure_subprocess, torch_memory_saver

__all__ = ["TorchMemorySaver", "configure_subprocess", "torch_memory_saver"]
