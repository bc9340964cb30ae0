"""Atomic checkpoints: `step-N.tmp-<host>-<uuid>` (one per writer) is written in full, then renamed to `step-N`;
the rename never replaces a `step-N` another writer made first. Every path stays under the checkpoint root: an
adapter is a name (never a path), and no symlink in an adapter's folder is followed, read or written through."""
import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
from pathlib import Path

import torch

STEP_DIR = re.compile(r"^step-(\d+)$")
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class AdapterError(ValueError):
    """A request named an adapter that does not exist or cannot be made (a 4xx, not a crash)."""


class CheckpointExists(FileExistsError):
    """Another writer renamed its `step-N` into place first."""


def adapter_dir(root: Path, adapter: str) -> Path:
    """`root/adapter`, for a valid adapter name only, and only if it is a real folder (or absent) under the root."""
    if not isinstance(adapter, str) or not NAME.match(adapter):
        raise AdapterError(f"adapter: '{adapter}' is not a valid name (letters, digits, _ and -)")
    folder = root / adapter
    if folder.is_symlink() or not folder.resolve(strict=False).is_relative_to(root.resolve(strict=False)):
        raise AdapterError(f"adapter: '{adapter}' is a link out of the checkpoint folder; refused")
    return folder


def step_dir(root: Path, adapter: str, step: int) -> Path:
    return adapter_dir(root, adapter) / f"step-{int(step)}"


def refuse_links(path: Path) -> None:
    """A checkpoint is read only if nothing in it is a symlink (one could point anywhere on the host)."""
    if path.is_symlink() or any(p.is_symlink() for p in path.rglob("*")):
        raise AdapterError(f"checkpoint: {path.name} holds a symlink; refused")


def under_root(root: Path, path: Path) -> Path:
    """`path` resolved (symlinks followed), if it lies under the checkpoint root; else AdapterError."""
    try:
        resolved = path.resolve(strict=True)
    except (FileNotFoundError, RuntimeError, OSError) as err:
        raise AdapterError(f"lora_path: no such folder {path}") from err
    if not resolved.is_relative_to(root.resolve(strict=False)):
        raise AdapterError(f"lora_path: {path} is not under this server's checkpoint folder")
    return resolved


def complete_steps(root: Path, adapter: str) -> list[int]:
    """Steps with a complete checkpoint; leftover `.tmp` folders (a crash mid-write) and symlinks are ignored."""
    folder = adapter_dir(root, adapter)
    if not folder.is_dir():
        return []
    return sorted(
        int(m.group(1)) for p in folder.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir() and not p.is_symlink()
    )


def read_metrics(root: Path, adapter: str, step: int) -> dict | None:
    folder = step_dir(root, adapter, step)
    if not folder.is_dir():
        return None
    refuse_links(folder)
    path = folder / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else None


def writer_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class StepBusy(RuntimeError):
    """Another writer holds a live lease on the step (a retryable 503), or took over ours when it went stale."""


def lease_path(root: Path, adapter: str, step: int) -> Path:
    return adapter_dir(root, adapter) / f"step-{int(step)}.lease"


def read_lease(path: Path, ttl_s: float) -> dict | None:
    """The lease's holder and expiry; None if there is none. A lease being written (empty) counts as live."""
    try:
        text = path.read_text()
        return json.loads(text)
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        try:
            return {"holder": "?", "expires": path.lstat().st_mtime + ttl_s}
        except FileNotFoundError:
            return None


def _lease_record(holder: str, ttl_s: float) -> str:
    return json.dumps({"holder": holder, "host": socket.gethostname(), "pid": os.getpid(), "expires": time.time() + ttl_s})


def lease_live(lease: dict | None) -> bool:
    """Held and not expired, and not by a process of this host that is gone (a server killed mid-step and
    restarted here takes its own step over at once instead of waiting out the expiry)."""
    if lease is None or lease.get("expires", 0) <= time.time():
        return False
    if lease.get("host") == socket.gethostname() and isinstance(lease.get("pid"), int):
        try:
            os.kill(lease["pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # alive, another user's
    return True


def _write_lease(path: Path, holder: str, ttl_s: float) -> None:
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}")
    tmp.write_text(_lease_record(holder, ttl_s))
    os.replace(tmp, path)  # replaces a symlink itself, never writes through it


def take_lease(root: Path, adapter: str, step: int, holder: str, ttl_s: float) -> Path:
    """A fencing lease on training `step`: created with O_EXCL; a live lease of another holder is StepBusy, a
    stale one (its holder died or stalled past its expiry) is taken over."""
    path = lease_path(root, adapter, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        lease = read_lease(path, ttl_s)
        if lease and lease.get("holder") != holder and lease_live(lease):
            raise StepBusy(f"step: step-{step} of '{adapter}' is being trained by {lease.get('holder')}; retry later")
        _write_lease(path, holder, ttl_s)  # stale, or ours already: taken over
        return path
    with os.fdopen(fd, "w") as f:
        f.write(_lease_record(holder, ttl_s))
    return path


def renew_lease(path: Path, holder: str, ttl_s: float) -> None:
    """Extends our lease; StepBusy if another writer took it over meanwhile (we stalled past its expiry)."""
    lease = read_lease(path, ttl_s)
    if lease is not None and lease.get("holder") != holder:
        raise StepBusy(f"step: the lease on {path.stem} was taken over by {lease.get('holder')}; nothing was saved")
    _write_lease(path, holder, ttl_s)


def release_lease(path: Path, holder: str, ttl_s: float) -> None:
    lease = read_lease(path, ttl_s)
    if lease is not None and lease.get("holder") == holder:
        path.unlink(missing_ok=True)


def clean_stale(root: Path, adapter: str, ttl_s: float) -> None:
    """Drops the temporary folders of dead writers: those whose step has no live lease (startup)."""
    folder = adapter_dir(root, adapter)
    if not folder.is_dir():
        return
    for tmp in folder.glob("step-*.tmp*"):
        step = tmp.name.split(".", 1)[0]
        lease = read_lease(folder / f"{step}.lease", ttl_s)
        if not lease_live(lease):
            if tmp.is_symlink() or not tmp.is_dir():
                tmp.unlink(missing_ok=True)
            else:
                shutil.rmtree(tmp, ignore_errors=True)


def save_checkpoint(root: Path, adapter: str, step: int, peft_model, optimizer, metrics: dict) -> Path:
    """Adapter in PEFT format (what vLLM loads), optimizer and RNG state, metrics; visible only when whole."""
    final = step_dir(root, adapter, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    adapter_dir(root, adapter)  # not a symlink swapped in meanwhile
    if final.exists() or final.is_symlink():
        raise CheckpointExists(f"step-{step} of '{adapter}' already exists")
    tmp = final.with_name(f"{final.name}.tmp-{writer_id()}-{uuid.uuid4().hex}")  # fresh: never another writer's
    tmp.mkdir()
    peft_model.save_pretrained(tmp / "adapter", selected_adapters=[adapter])
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"cpu": torch.get_rng_state()}, tmp / "rng.pt")
    (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2))
    for f in tmp.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    try:
        if final.exists() or final.is_symlink():
            raise CheckpointExists(f"step-{step} of '{adapter}' already exists")
        os.rename(tmp, final)  # onto a whole (non-empty) step-N a directory rename fails: the first writer wins
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, CheckpointExists) or final.exists():
            raise CheckpointExists(f"step-{step} of '{adapter}' already exists") from err
        raise
    dir_fd = os.open(final.parent, os.O_RDONLY)
    os.fsync(dir_fd)
    os.close(dir_fd)
    return final


def adapter_weights_path(root: Path, adapter: str, step: int) -> Path:
    """save_pretrained puts a non-default adapter in a subfolder named after it."""
    base = step_dir(root, adapter, step) / "adapter"
    return base / adapter if (base / adapter).is_dir() and not (base / adapter).is_symlink() else base


def describe(root: Path, adapter: str, step: int) -> dict:
    """Where a step's adapter lies and the SHA-256 of its weights: what a publisher records."""
    weights = adapter_weights_path(root, adapter, step)
    refuse_links(step_dir(root, adapter, step))
    top = root.resolve(strict=False)
    digest = hashlib.sha256()
    for f in sorted(weights.glob("*.safetensors")):
        if f.is_symlink() or not f.is_file() or not f.resolve(strict=True).is_relative_to(top):
            raise AdapterError(f"checkpoint: {f.name} of '{adapter}' step-{step} is not a regular file; refused")
        digest.update(f.read_bytes())
    return {"checkpoint": str(weights.resolve()), "sha256": digest.hexdigest()}


def prune(root: Path, adapter: str, keep_last: int):
    """Checkpoint retention: drop all but the newest `keep_last` complete steps (step 0 is kept)."""
    steps = complete_steps(root, adapter)
    for s in steps[:-keep_last] if keep_last > 0 else []:
        if s != 0:
            shutil.rmtree(step_dir(root, adapter, s), ignore_errors=True)
