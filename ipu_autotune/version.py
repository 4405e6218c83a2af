"""The package version, in a module of its own: every layer reads it, and the package itself
(which exposes the Python API, a command-layer entry) is imported by none of them."""

__version__ = "0.1.0"
