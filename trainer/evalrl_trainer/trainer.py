"""Training service: exactly-once steps per (adapter, step), with progress and cancellation."""
import dataclasses
import threading
import time
from dataclasses import dataclass, field

from . import checkpoints
from .adapters import LEASE_S, Adapters, AdapterError
from .checkpoints import StepBusy  # noqa: F401 (a retryable 503: another host trains the step)
from .lora import LoraSettings
from .train_step import Sequence, StepConfig, train_step


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
    def __init__(self, adapters: Adapters, keep_checkpoints: int = 0, tokens_per_micro_batch: int = 1024,
                 lease_s: float = LEASE_S, holder: str | None = None):  # fmt: skip
        self.adapters = adapters
        self.lease_s = lease_s  # a step's lease on shared checkpoints, renewed each micro-batch
        self.holder = holder or f"{checkpoints.writer_id()}-{id(self):x}"  # who trains, named in a 503
        self.keep = keep_checkpoints
        self.tokens_per_micro_batch = tokens_per_micro_batch  # padded tokens per forward/backward
        self.running: dict[str, Progress] = {}

    def step(
        self,
        adapter: str,
        step: int,
        sequences: list[Sequence],
        cfg: StepConfig,
        lora: LoraSettings,
        keep: int | None = None,
        digest: str = "",
    ) -> dict:
        """Trains step `step` of `adapter` once. The same request again (same `digest`) gets the stored result;
        a different request for a checkpointed step is refused, so a step can be neither applied twice nor
        pre-empted by another request."""
        root = self.adapters.root
        checkpoints.adapter_dir(root, adapter)  # a name under the root, never a path: before any other access
        asked = request_settings(cfg, lora)
        done = checkpoints.read_metrics(root, adapter, step)
        if done is not None and step > 0:
            return self._stored(adapter, step, done, digest, asked)
        on_disk = checkpoints.complete_steps(self.adapters.root, adapter)
        if on_disk and on_disk[-1] > self.adapters.trained.get(adapter, -1):
            # Another host trained it since (the checkpoints are shared): take over from its last checkpoint.
            self.adapters.restore(adapter, on_disk[-1])
        if adapter not in self.adapters.trained:
            if step != 1:
                raise AdapterError(f"adapter: unknown adapter '{adapter}' (a new adapter starts at step 1)")
            self.adapters.create(adapter, lora)
        latest = self.adapters.trained[adapter]
        if step != latest + 1:
            raise StepConflict(f"step: {step} does not follow the latest checkpoint of '{adapter}' (step-{latest})")
        if adapter in self.running:
            raise StepConflict(f"step: adapter '{adapter}' is already training step {self.running[adapter].step}")
        # Shared checkpoints: one host trains a step at a time (another gets a retryable 503), and a host that
        # stalled past its lease loses it (its renewal fails) rather than writing beside the new holder.
        lease = checkpoints.take_lease(root, adapter, step, self.holder, self.lease_s)
        progress = Progress(step=step)
        self.running[adapter] = progress
        self.adapters.busy.add(adapter)  # never evicted while it trains

        def on_micro_batch(done_: int, total: int):
            progress.micro_batches_done, progress.micro_batches = done_, total
            if progress.cancel.is_set():
                raise Cancelled(f"step {step} of '{adapter}' was cancelled; nothing was saved")
            checkpoints.renew_lease(lease, self.holder, self.lease_s)

        try:
            with self.adapters.lock:
                # Until step-N is whole on disk the step has not happened: any failure (a cancel, a full disk)
                # puts the weights and optimizer back as they were, so a retry trains from the same state.
                before = self.adapters.snapshot(adapter)
                try:
                    metrics = self._train(adapter, sequences, cfg, on_micro_batch)
                    metrics = {**metrics, "step": step, "adapter": adapter, "learning_rate": cfg.learning_rate,
                               "request_digest": digest, "request": asked}  # fmt: skip
                    checkpoints.renew_lease(lease, self.holder, self.lease_s)  # still ours: no one took over
                    checkpoints.save_checkpoint(
                        self.adapters.root, adapter, step, self.adapters.peft, self.adapters.optimizers[adapter], metrics
                    )
                except checkpoints.CheckpointExists:
                    # Another writer's step-N won the rename: ours is discarded and the winner's state loaded.
                    self.adapters.restore(adapter, step)
                    self.adapters.changed(adapter)
                    return self._stored(adapter, step, checkpoints.read_metrics(root, adapter, step) or {}, digest, asked)
                except BaseException:
                    self.adapters.restore_snapshot(adapter, before)
                    raise
                self.adapters.trained[adapter] = step
                self.adapters.changed(adapter)
                keep_last = self.keep if keep is None else keep  # the run's retention, else the server's
                if keep_last:
                    checkpoints.prune(self.adapters.root, adapter, keep_last)
            return {**metrics, **checkpoints.describe(self.adapters.root, adapter, step), "cached": False}
        finally:
            self.running.pop(adapter, None)
            self.adapters.busy.discard(adapter)
            checkpoints.release_lease(lease, self.holder, self.lease_s)

    def _stored(self, adapter: str, step: int, done: dict, digest: str, asked: dict) -> dict:
        """A checkpointed step's result for the same request; a 409 naming what differs for another."""
        if done.get("request_digest", digest) != digest:
            trained = done.get("request")
            if trained is None:
                why = "a different request (it predates recording its hyperparameters)"
            else:
                diffs = [f"{k}: step-{step} was trained with {trained.get(k)}, this request asks {asked.get(k)}"
                         for k in sorted(set(trained) | set(asked)) if trained.get(k) != asked.get(k)]  # fmt: skip
                why = "; ".join(diffs) or "the same hyperparameters but other sequences"
            raise StepConflict(f"step: step-{step} of '{adapter}' was trained from a different request: {why}")
        return {**done, **checkpoints.describe(self.adapters.root, adapter, step), "cached": True}

    def _train(self, adapter: str, sequences: list[Sequence], cfg: StepConfig, on_micro_batch) -> dict:
        """One optimizer step with only `adapter`'s weights trainable."""
        peft = self.adapters.peft
        peft.set_adapter(adapter)
        params = self.adapters.trainable_parameters(adapter)
        for p in params:
            p.requires_grad_(True)
        try:
            return train_step(peft, self.adapters.optimizers[adapter], sequences, cfg, on_micro_batch)
        finally:
            for p in params:
                p.requires_grad_(False)
                p.grad = None
            peft.eval()

    def progress(self, adapter: str) -> dict:
        checkpoints.adapter_dir(self.adapters.root, adapter)
        p = self.running.get(adapter)
        latest = self.adapters.trained.get(adapter)
        if latest is None:  # not resident (restored lazily): its latest checkpoint says
            on_disk = checkpoints.complete_steps(self.adapters.root, adapter)
            latest = on_disk[-1] if on_disk else None
        if p is None:
            return {"adapter": adapter, "running": False, "latest_step": latest}
        return {
            "adapter": adapter, "running": True, "step": p.step, "latest_step": latest,
            "micro_batches_done": p.micro_batches_done, "micro_batches": p.micro_batches,
            "seconds": time.time() - p.started,
        }  # fmt: skip

    def cancel(self, adapter: str) -> bool:
        checkpoints.adapter_dir(self.adapters.root, adapter)
        p = self.running.get(adapter)
        if p is not None:
            p.cancel.set()
        return p is not None


def request_settings(cfg: StepConfig, lora: LoraSettings) -> dict:
    """What a step was trained with, besides its sequences: stored in its metrics, named in a 409."""
    loss = {k: v for k, v in dataclasses.asdict(cfg.loss).items()}
    return {"learning_rate": cfg.learning_rate, "max_grad_norm": cfg.max_grad_norm, **loss,
            "lora.rank": lora.rank, "lora.alpha": lora.alpha, "lora.init_seed": lora.init_seed,
            "lora.init_from": lora.init_from}  # fmt: skip
