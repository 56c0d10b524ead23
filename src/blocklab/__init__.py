"""blocklab: which building block, at which depth and width, is best at a fixed parameter budget."""

__version__ = "0.1.0"
