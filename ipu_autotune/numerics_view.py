"""Moved to `ipu_autotune.numerics.view`; this name stays for callers until the package is
restructured (issue 15)."""

from .numerics.view import SHOWN_EXPONENTS, recommendations, render, scale_table

__all__ = ["SHOWN_EXPONENTS", "recommendations", "render", "scale_table"]
