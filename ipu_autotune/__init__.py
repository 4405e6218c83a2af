"""ipu-autotune: from an out-of-memory PopTorch configuration to a fast one that fits."""

__version__ = "0.1.0"
