"""Atomic checkpoints: `step-N.tmp` is written in full, then renamed to `step-N` (a rename is atomic)."""
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import torch

STEP_DIR = re.compile(r"^step-(\d+)$")


def step_dir(root: Path, adapter: str, step: int) -> Path:
    return root / adapter / f"step-{step}"


def complete_steps(root: Path, adapter: str) -> list[int]:
    """Steps with a complete checkpoint; leftover `.tmp` folders (a crash mid-write) are ignored."""
    folder = root / adapter
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir())


def read_metrics(root: Path, adapter: str, step: int) -> dict | None:
    path = step_dir(root, adapter, step) / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else None


def save_checkpoint(root: Path, adapter: str, step: int, peft_model, optimizer, metrics: dict) -> Path:
    """Adapter in PEFT format (what vLLM loads), optimizer and RNG state, metrics; visible only when whole."""
    final = step_dir(root, adapter, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    peft_model.save_pretrained(tmp / "adapter", selected_adapters=[adapter])
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"cpu": torch.get_rng_state()}, tmp / "rng.pt")
    (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2))
    for f in tmp.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(final.parent, os.O_RDONLY)
    os.fsync(dir_fd)
    os.close(dir_fd)
    return final


def adapter_weights_path(root: Path, adapter: str, step: int) -> Path:
    """save_pretrained puts a non-default adapter in a subfolder named after it."""
    base = step_dir(root, adapter, step) / "adapter"
    return base / adapter if (base / adapter).is_dir() else base


def describe(root: Path, adapter: str, step: int) -> dict:
    """Where a step's adapter lies and the SHA-256 of its weights: what a publisher records."""
    weights = adapter_weights_path(root, adapter, step)
    digest = hashlib.sha256()
    for f in sorted(weights.glob("*.safetensors")):
        digest.update(f.read_bytes())
    return {"checkpoint": str(weights.resolve()), "sha256": digest.hexdigest()}


def prune(root: Path, adapter: str, keep_last: int):
    """Checkpoint retention: drop all but the newest `keep_last` complete steps (step 0 is kept)."""
    steps = complete_steps(root, adapter)
    for s in steps[:-keep_last] if keep_last > 0 else []:
        if s != 0:
            shutil.rmtree(step_dir(root, adapter, s), ignore_errors=True)
