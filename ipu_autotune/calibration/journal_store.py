"""The calibration store as a journal file: JSON lines on a shared file system.

The first line is the header `{"ipu_autotune_calibration": FORMAT}`; each further line one
record. Writers hold an exclusive lock on `FILE.lock` (fcntl.flock; the same file systems
Optuna's journal needs) while they check the key and append, so two workers writing the
same compile store it once. A line left half-written by a killed worker is skipped on
reading (and counted); `forget` rewrites the file to a temporary one and renames it over,
so a reader sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .record import FORMAT, check_record, matches
from .refusal import no_store_yet, refused

HEADER = "ipu_autotune_calibration"


class JournalStore:
    def __init__(self, path: Path, url: str, create: bool = True):
        self.path, self.url = Path(path), url
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        if not self.path.exists() or self.path.stat().st_size == 0:
            if not create:
                raise no_store_yet(url)
            with self._locked():
                if not self.path.exists() or self.path.stat().st_size == 0:
                    # whole or not at all: a worker reading without the lock never sees
                    # half a header
                    tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                    tmp.write_text(json.dumps({HEADER: FORMAT}) + "\n")
                    os.replace(tmp, self.path)
        self._check_header()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o664)
        except OSError as exc:
            raise refused(
                self.url, f"cannot lock {self.lock_path}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _check_header(self) -> None:
        try:
            with open(self.path, "rb") as f:
                first = f.readline(4096)
            header = json.loads(first)
        except (OSError, ValueError):
            header = None
        if not isinstance(header, dict) or HEADER not in header:
            raise refused(
                self.url, "not a calibration journal (its first line is not the store's header)"
            )
        if header[HEADER] != FORMAT:
            raise refused(
                self.url,
                f"record format {header[HEADER]!r}, this ipu-autotune reads {FORMAT}",
                "use the ipu-autotune that wrote it, or move it aside",
            )

    def _lines(self) -> list[bytes]:
        with open(self.path, "rb") as f:
            return f.read().splitlines()[1:]

    def add(self, record: dict[str, Any]) -> bool:
        line = (json.dumps(record, default=float) + "\n").encode()
        with self._locked():
            key = record["key"]
            for raw in self._lines():
                with contextlib.suppress(ValueError):
                    if json.loads(raw).get("key") == key:
                        return False
            with open(self.path, "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        return True

    def records(
        self, target: str | None = None, sdk: str | None = None, study: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        out, bad, seen = [], 0, set()
        for raw in self._lines():
            try:
                r = json.loads(raw)
            except ValueError:
                bad += 1
                continue
            if check_record(r) is not None:
                bad += 1
            elif r["key"] not in seen and matches(r, target, sdk, study):
                seen.add(r["key"])
                out.append(r)
        return out, bad

    def forget(
        self, target: str | None = None, sdk: str | None = None, study: str | None = None
    ) -> int:
        assert any(v is not None for v in (target, sdk, study)), "forget names at least one filter"
        with self._locked():
            lines, kept, gone = self._lines(), [], 0
            for raw in lines:
                try:
                    r = json.loads(raw)
                except ValueError:
                    kept.append(raw)  # not ours to judge: a half line stays as it was
                    continue
                if isinstance(r, dict) and matches(r, target, sdk, study):
                    gone += 1
                else:
                    kept.append(raw)
            if gone:
                tmp = self.path.with_name(self.path.name + ".tmp")
                tmp.write_bytes(b"\n".join([json.dumps({HEADER: FORMAT}).encode(), *kept]) + b"\n")
                os.replace(tmp, self.path)
        return gone

    def close(self) -> None:
        pass
