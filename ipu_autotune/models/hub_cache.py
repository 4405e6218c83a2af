"""An `hf:NAME` the user has already downloaded: its config.json in the local Hugging Face cache.

Read with no network: huggingface_hub's `try_to_load_from_cache` resolves
`models--ORG--NAME/refs/main` to `snapshots/<revision>/config.json` on disk and never
connects. The cache folder is read from the environment on each call, the way
`huggingface_hub.constants` resolves it (HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE, then
HF_HOME/hub, then $XDG_CACHE_HOME/huggingface/hub, default ~/.cache/huggingface/hub): that
module reads it once, at import, so a variable set later would be missed.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(os.path.expandvars(hub)).expanduser()


def cached_snapshot(repo_id: str) -> Path | None:
    """The snapshot folder holding `repo_id`'s cached config.json (main revision), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    where = cache_dir()
    if not where.is_dir():
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=str(where))
    except ValueError:  # not a valid repo id (HFValidationError): nothing of it can be cached
        return None
    return Path(found).parent if isinstance(found, str) and Path(found).is_file() else None
