"""A store that is not one: refused with one line naming it and the fix."""

from __future__ import annotations

from ..errors import UsageError
from ..study.storage import mask_url


class StoreRefused(UsageError):
    """The URL names something that is not a calibration store this version can use."""


#: what to do about a store that is refused
FIX = "move it aside, or give --calibration-storage another file (or tune with --no-calibration)"
#: what to do about a store that has no records yet
EMPTY_FIX = "run a study with a compiling backend first, or give --calibration-storage"


class NoStoreYet(StoreRefused):
    """Nothing there yet: refused where a store must be read into a study, but only empty to
    `ipu-autotune calibration`, which says so and exits 0."""


def no_store_yet(url: str) -> NoStoreYet:
    return NoStoreYet(
        f"calibration store {mask_url(url)}: no calibration store there (no compile recorded "
        f"yet); {EMPTY_FIX}"
    )


def refused(url: str, why: str, fix: str = FIX) -> StoreRefused:
    return StoreRefused(f"calibration store {mask_url(url)}: {why}; {fix}")
