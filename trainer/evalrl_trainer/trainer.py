"""Training service: exactly-once GRPO steps per (adapter, step), with progress and cancellation."""
import threading
import time
from dataclasses import dataclass, field

import torch

from . import checkpoints
from .adapters import Adapters, AdapterError
from .grpo import LossConfig
from .lora import LoraSettings
from .train_step import Batch, StepConfig, train_step


class StepConflict(ValueError):
    """A step that would leave a gap (or rewrite history): the caller's bookkeeping is off."""


class Cancelled(RuntimeError):
    pass


@dataclass
class Progress:
    step: int
    micro_batches_done: int = 0
    micro_batches: int = 0
    started: float = field(default_factory=time.time)
    cancel: threading.Event = field(default_factory=threading.Event)


class Trainer:
    def __init__(self, adapters: Adapters, keep_checkpoints: int = 0):
        self.adapters = adapters
        self.keep = keep_checkpoints
        self.running: dict[str, Progress] = {}

    def step(
        self, adapter: str, step: int, batch: Batch, cfg: StepConfig, lora: LoraSettings, keep: int | None = None
    ) -> dict:
        """Trains step `step` of `adapter` once. Asked again for a checkpointed step: the stored metrics."""
        done = checkpoints.read_metrics(self.adapters.root, adapter, step)
        if done is not None and step > 0:
            return {**done, **checkpoints.describe(self.adapters.root, adapter, step), "cached": True}
        if adapter not in self.adapters.trained:
            if step != 1:
                raise AdapterError(f"adapter: unknown adapter '{adapter}' (a new adapter starts at step 1)")
            self.adapters.create(adapter, lora)
        latest = self.adapters.trained[adapter]
        if step != latest + 1:
            raise StepConflict(f"step: {step} does not follow the latest checkpoint of '{adapter}' (step-{latest})")
        if adapter in self.running:
            raise StepConflict(f"step: adapter '{adapter}' is already training step {self.running[adapter].step}")
        progress = Progress(step=step)
        self.running[adapter] = progress

        def on_micro_batch(done_: int, total: int):
            progress.micro_batches_done, progress.micro_batches = done_, total
            if progress.cancel.is_set():
                raise Cancelled(f"step {step} of '{adapter}' was cancelled; nothing was saved")

        try:
            with self.adapters.lock:
                peft = self.adapters.peft
                peft.set_adapter(adapter)
                params = self.adapters.trainable_parameters(adapter)
                for p in params:
                    p.requires_grad_(True)
                try:
                    metrics = train_step(peft, self.adapters.optimizers[adapter], batch, cfg, on_micro_batch)
                finally:
                    for p in params:
                        p.requires_grad_(False)
                        p.grad = None
                    peft.eval()
                metrics = {**metrics, "step": step, "adapter": adapter, "learning_rate": cfg.learning_rate}
                checkpoints.save_checkpoint(self.adapters.root, adapter, step, peft, self.adapters.optimizers[adapter], metrics)
                self.adapters.trained[adapter] = step
                keep_last = self.keep if keep is None else keep  # the run's retention, else the server's
                if keep_last:
                    checkpoints.prune(self.adapters.root, adapter, keep_last)
            return {**metrics, **checkpoints.describe(self.adapters.root, adapter, step), "cached": False}
        finally:
            self.running.pop(adapter, None)

    def progress(self, adapter: str) -> dict:
        p = self.running.get(adapter)
        latest = self.adapters.trained.get(adapter)
        if p is None:
            return {"adapter": adapter, "running": False, "latest_step": latest}
        return {
            "adapter": adapter, "running": True, "step": p.step, "latest_step": latest,
            "micro_batches_done": p.micro_batches_done, "micro_batches": p.micro_batches,
            "seconds": time.time() - p.started,
        }  # fmt: skip

    def cancel(self, adapter: str) -> bool:
        p = self.running.get(adapter)
        if p is not None:
            p.cancel.set()
        return p is not None


def batch_from_sequences(sequences: list[dict]) -> Batch:
    """Right-pads a request's sequences into tensors."""
    T = max(len(s["token_ids"]) for s in sequences)
    B = len(sequences)
    ids = torch.zeros((B, T), dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T))
    old = torch.zeros((B, T))
    for i, s in enumerate(sequences):
        n = len(s["token_ids"])
        ids[i, :n] = torch.tensor(s["token_ids"])
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(s["mask"], dtype=torch.float32)
        old[i, :n] = torch.tensor(s["logprobs"], dtype=torch.float32) * mask[i, :n]
    adv = torch.tensor([s["advantage"] for s in sequences], dtype=torch.float32)
    return Batch(ids, attn, mask, old, adv)


__all__ = ["Trainer", "StepConflict", "Cancelled", "batch_from_sequences", "LossConfig"]
