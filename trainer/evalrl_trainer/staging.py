"""A training step's sequences uploaded in chunks, staged on disk until the step is asked for.

A production step's body can exceed what one request may carry, so the client sends its sequences in chunks
keyed by (adapter, step, digest of the whole request). Chunks are files under the checkpoint root, so memory
stays bounded whatever the step's size; each is written whole then renamed, so a retried or duplicated upload
rewrites the same file. A step trains only from a complete set. Chunks are spent once the step is asked for
(a retry stages them again, and gets the stored result), and an abandoned upload is dropped after a timeout.
"""
import os
import re
import shutil
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Iterator

from .checkpoints import NAME, AdapterError

UPLOAD = re.compile(r"^[0-9a-f]{64}$")


class IncompleteUpload(ValueError):
    """Chunks are missing: never sent, expired, or spent by another request for the step."""


class Staging:
    def __init__(self, root: Path, ttl_s: float = 3600.0):
        self.folder = root / ".staging"  # not an adapter name, so resuming adapters passes it by
        self.ttl_s = ttl_s  # an upload's chunks arrive within seconds; an hour idle means the caller is gone

    def put(self, adapter: str, step: int, upload: str, index: int, count: int, chunk: bytes) -> None:
        self.expire()
        folder = self._upload(adapter, step, upload)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{index}-of-{count}.json"
        tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")  # one per concurrent upload
        tmp.write_bytes(chunk)
        os.replace(tmp, path)

    def read(self, adapter: str, step: int, upload: str, count: int) -> Iterator[bytes]:
        """The chunks in order, one at a time; IncompleteUpload, before the first, if any is missing."""
        paths = [self._upload(adapter, step, upload) / f"{i}-of-{count}.json" for i in range(count)]
        missing = [i for i, p in enumerate(paths) if not p.is_file()]
        if missing:
            raise IncompleteUpload(f"upload: chunks {missing} of {count} are not staged (never sent, expired, or "
                                   "spent by another request for the step): upload them again")  # fmt: skip
        for p in paths:
            try:
                yield p.read_bytes()
            except FileNotFoundError as err:  # spent meanwhile by a concurrent request for the step
                raise IncompleteUpload(f"upload: chunk {p.name} was dropped while being read: upload it again") from err

    def drop(self, adapter: str, step: int, upload: str) -> None:
        shutil.rmtree(self._upload(adapter, step, upload), ignore_errors=True)

    def expire(self) -> None:
        """Drops uploads that have not changed for the timeout (their caller gave up or asked for another step)."""
        now = time.time()
        for folder in self.folder.glob("*/*"):
            with suppress(FileNotFoundError):  # spent meanwhile by a request for its step
                if now - folder.stat().st_mtime > self.ttl_s:
                    shutil.rmtree(folder, ignore_errors=True)

    def _upload(self, adapter: str, step: int, upload: str) -> Path:
        if not NAME.match(adapter) or not UPLOAD.match(upload):  # names, never paths
            raise AdapterError(f"upload: '{adapter}' / '{upload}' is not an adapter name and upload digest")
        return self.folder / adapter / f"step-{step}-{upload}"
