"""One sample's shape written as text: `3,224,224` or `3x224x224`. The one reading of it, for
`--input-shape` (options/values.py) and an input's `NAME:SHAPE:DTYPE` (models/inputs.py)."""

from __future__ import annotations


def parse_shape(text: str) -> tuple[int, ...]:
    """The dimensions, or a ValueError saying what is wrong with them."""
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(","))
    except ValueError:
        raise ValueError(f"shape '{text}' is not whole numbers joined by ',' or 'x'") from None
    if any(d < 1 for d in dims):
        raise ValueError(f"dimensions must be positive, got '{text}'")
    return dims
