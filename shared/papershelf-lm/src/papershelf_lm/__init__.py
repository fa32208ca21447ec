"""papershelf-lm: the LM testbed."""

__version__ = "0.0.1"

from papershelf_lm.attention import attention, capture, greedy_generate
from papershelf_lm.model import checkpoint_names, extend_context, load

__all__ = ["attention", "capture", "checkpoint_names", "extend_context", "greedy_generate", "load"]
