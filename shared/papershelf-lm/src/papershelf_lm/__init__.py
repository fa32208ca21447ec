"""papershelf-lm: the LM testbed."""

__version__ = "0.0.1"
