"""Named LoRA adapters resident on one base model: trained ones with checkpoints, loaded ones read-only.

Addressing (the `model` of a request): `base`; `policy` or `policy@latest` (the adapter as trained so far);
`policy@step-12` (that step: the trained adapter itself while it is at that step, a copy published under that
address with load_lora_adapter, or else its checkpoint, loaded on first use as a read-only adapter).
"""
import copy
import hashlib
import re
import threading
import time
from pathlib import Path

import torch
from peft import PeftModel, get_peft_model

from . import checkpoints
from .checkpoints import AdapterError  # noqa: F401 (raised here too; the server answers it with a 4xx)
from .base_model import BaseModel
from .lora import LoraSettings, lora_config

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
KEEP_LOADED_STEPS = 2
MAX_TRAINED = 8  # trained adapters resident at once; the least recently used is evicted (its state is on disk)
LEASE_S = 600.0  # a step's training lease: renewed every micro-batch, taken over by another host once expired
PROBES = ".preflight"  # probe adapters; a name starting with "." is never resumed as an adapter
ADDRESS = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_-]{0,63})(?:@(?P<ref>latest|step-(?P<step>\d+)))?$")


class WeightsLock:
    """A re-entrant lock that says whether another thread waits for it: the sampler admits no new request to a
    running batch while one does, so a train step or an adapter load waits for that batch's rows to finish, not
    for a stream of new ones."""

    def __init__(self):
        self._lock = threading.RLock()
        self._counting = threading.Lock()
        self.waiting = 0

    def __enter__(self):
        with self._counting:
            self.waiting += 1
        try:
            self._lock.acquire()
        finally:
            with self._counting:
                self.waiting -= 1
        return self

    def __exit__(self, *_):
        self._lock.release()


class Adapters:
    def __init__(self, base: BaseModel, root: Path, seed: int = 0, max_trained: int = MAX_TRAINED):
        self.base = base
        self.max_trained = max_trained
        self.used: dict[str, float] = {}  # trained adapter → last use (LRU eviction)
        self.busy: set[str] = set()  # adapters training now: never evicted
        self.root = root
        self.seed = seed
        self.peft: PeftModel | None = None
        self.trained: dict[str, int] = {}  # trainable adapter → latest checkpointed step
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.loaded: set[str] = set()  # read-only adapters (checkpoints, vLLM-style loads)
        self.revisions: dict[str, int] = {}  # bumped whenever an adapter's weights change
        self.fingerprints: dict[str, tuple[int, str]] = {}  # adapter → (revision, digest of its weights)
        self.lock = WeightsLock()  # one user of the weights at a time: a sampling batch or a train step

    # --- lookup -----------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self.trained) + sorted(self.loaded)

    def resolve(self, address: str) -> str | None:
        """The resident adapter a request's `model` names (None for the base model)."""
        if address == "base":
            return None
        m = ADDRESS.match(address)
        if not m:
            raise AdapterError(f"model: '{address}' is not an adapter address (name, name@latest, name@step-N, base)")
        name = m.group("name")
        if m.group("step") is None:
            self.ensure(name)
            if name in self.trained or name in self.loaded:
                return name
            raise AdapterError(f"model: unknown adapter '{name}'; resident: {', '.join(self.names()) or 'none'}")
        step = int(m.group("step"))
        if self.trained.get(name) == step:
            return name  # trained here and still at that step (a stage trains only after its rollouts are in)
        if address in self.loaded:
            return address  # published under its address (load_lora_adapter)
        alias = f"{name}__step_{step}"
        if alias not in self.loaded:
            if step not in checkpoints.complete_steps(self.root, name):
                raise AdapterError(f"model: adapter '{name}' has no checkpoint step-{step}")
            self._load(alias, checkpoints.adapter_weights_path(self.root, name, step))
            self._evict_old_steps(name)
        return alias

    def _evict_old_steps(self, name: str) -> None:
        """Checkpoints loaded on demand (a sampling host following a trainer) keep the two newest per adapter:
        step N+1 samples from step N, and a late retry may still ask for N-1."""
        loaded = sorted((int(a.rsplit("_", 1)[1]), a) for a in self.loaded if a.startswith(f"{name}__step_"))
        for _, alias in loaded[:-KEEP_LOADED_STEPS]:
            self.unload(alias)

    def revision(self, name: str | None) -> int:
        return 0 if name is None else self.revisions.get(name, 0)

    def changed(self, name: str) -> None:
        self.revisions[name] = self.revisions.get(name, 0) + 1

    def fingerprint(self, name: str | None) -> str | None:
        """A digest of what an adapter computes (its LoRA weights and scaling; None: the base model). Two runs
        that start from one checkpoint hold equal adapters under two names: the sampler treats them as one
        (prefix cache, batches, seeded samples). Call with the lock held: weights change only under it."""
        if name is None:
            return None
        revision = self.revision(name)
        known = self.fingerprints.get(name)
        if known is None or known[0] != revision:
            config = self.peft.peft_config[name]
            digest = hashlib.sha256(f"{config.lora_alpha}:{config.use_rslora}".encode())
            for n, p in self.peft.named_parameters():
                if f".{name}." in n and "lora_" in n:
                    digest.update(n.replace(f".{name}.", ".").encode())
                    digest.update(p.detach().float().cpu().numpy().tobytes())
            known = self.fingerprints[name] = (revision, digest.hexdigest())
        return known[1]

    def representative(self, name: str | None) -> str | None:
        """The first resident adapter (by name) with `name`'s weights: a batch of equal adapters runs as one."""
        if name is None:
            return None
        mine = self.fingerprint(name)
        return next(other for other in self.names() if self.fingerprint(other) == mine)

    # --- trainable adapters -----------------------------------------------------------------------------
    def create(self, name: str, settings: LoraSettings) -> None:
        """A new trainable adapter, checkpointed as step 0: initialised from its init seed (default: its name), or
        a copy of the checkpoint `init_from` names (its weights and LoRA shape; a fresh optimizer)."""
        if not NAME.match(name):
            raise AdapterError(f"adapter: '{name}' is not a valid name (letters, digits, _ and -)")
        with self.lock:
            if name in self.trained:
                return
            if settings.init_from:
                self._load(name, self._checkpoint(settings.init_from), trainable=True)
            else:
                digest = hashlib.sha256(f"{self.seed}:{settings.init_seed or name}".encode()).digest()
                torch.manual_seed(int.from_bytes(digest[:8], "little") % 2**63)
                config = lora_config(settings)
                if self.peft is None:
                    self.peft = get_peft_model(self.base.model, config, adapter_name=name)
                else:
                    self.peft.add_adapter(name, config)
                self._freeze_all()
            self.optimizers[name] = self._optimizer(name)
            self.trained[name] = 0
            self.used[name] = time.monotonic()
            self._evict_trained()
            try:
                checkpoints.save_checkpoint(self.root, name, 0, self.peft, self.optimizers[name], {"step": 0})
            except checkpoints.CheckpointExists:
                pass  # another host created it at the same moment, from the same name and seed

    def _checkpoint(self, address: str) -> Path:
        """The PEFT folder of a complete checkpoint `name@step-N`."""
        m = ADDRESS.match(address)
        if not m or m.group("step") is None:
            raise AdapterError(f"lora.init_from: '{address}' is not a checkpoint address (name@step-N)")
        name, step = m.group("name"), int(m.group("step"))
        if step not in checkpoints.complete_steps(self.root, name):
            raise AdapterError(f"lora.init_from: adapter '{name}' has no checkpoint step-{step}")
        return checkpoints.adapter_weights_path(self.root, name, step)

    def resume_all(self) -> dict[str, int]:
        """Every adapter under the checkpoint root and its latest complete checkpoint, restored lazily: on first
        use (a train step, a sampling request, `ensure`), not at startup."""
        if not self.root.is_dir():
            return {}
        found = {}
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink() and NAME.match(p.name)):
            checkpoints.clean_stale(self.root, folder.name, LEASE_S)  # checkpoints dead writers left half-written
            steps = checkpoints.complete_steps(self.root, folder.name)
            if steps:
                found[folder.name] = steps[-1]
        return found

    def ensure(self, name: str) -> None:
        """A trained adapter resident (restored from its latest checkpoint if it is not), marked as just used."""
        if name not in self.trained and name not in self.loaded and NAME.match(name):
            steps = checkpoints.complete_steps(self.root, name)
            if steps:
                self.restore(name, steps[-1])
        if name in self.trained:
            self.used[name] = time.monotonic()

    def _evict_trained(self) -> None:
        """At most `max_trained` trained adapters resident: the least recently used idle one goes (on disk)."""
        while len(self.trained) > self.max_trained:
            idle = [n for n in self.trained if n not in self.busy]
            if not idle:
                return
            name = min(idle, key=lambda n: self.used.get(n, 0.0))
            with self.lock:
                self._delete(name)
                for table in (self.trained, self.optimizers, self.used, self.fingerprints):
                    table.pop(name, None)
                self.changed(name)

    def restore(self, name: str, step: int) -> None:
        """Loads a trainable adapter's weights, optimizer and RNG state from `step-N`."""
        with self.lock:
            checkpoints.refuse_links(checkpoints.step_dir(self.root, name, step))
            path = checkpoints.adapter_weights_path(self.root, name, step)
            if name in self.trained or name in self.loaded:
                self._delete(name)
            self._load(name, path, trainable=True)
            self.loaded.discard(name)
            optimizer = self._optimizer(name)
            optimizer.load_state_dict(torch.load(checkpoints.step_dir(self.root, name, step) / "optimizer.pt"))
            torch.set_rng_state(torch.load(checkpoints.step_dir(self.root, name, step) / "rng.pt")["cpu"])
            self.optimizers[name] = optimizer
            self.trained[name] = step
            self.used[name] = time.monotonic()
            self._evict_trained()

    def trainable_parameters(self, name: str) -> list[torch.nn.Parameter]:
        return [p for n, p in self.peft.named_parameters() if f".{name}." in n and "lora_" in n]

    def snapshot(self, name: str) -> dict:
        """A copy of a trainable adapter's weights and optimizer state (small: LoRA only)."""
        weights = {n: p.detach().clone() for n, p in self.peft.named_parameters() if f".{name}." in n and "lora_" in n}
        return {"weights": weights, "optimizer": copy.deepcopy(self.optimizers[name].state_dict())}

    def restore_snapshot(self, name: str, snapshot: dict) -> None:
        self.changed(name)
        with torch.no_grad():
            for n, p in self.peft.named_parameters():
                if n in snapshot["weights"]:
                    p.copy_(snapshot["weights"][n])
        self.optimizers[name].load_state_dict(snapshot["optimizer"])

    # --- read-only adapters (vLLM's load_lora_adapter) ----------------------------------------------------
    def load_external(self, name: str, path: Path, anywhere: bool = False) -> None:
        """`name` is a plain name or a version's address, `policy@step-3` (how evalrl publishes a trained step).
        The path must lie under this server's checkpoint root unless `anywhere` (the vLLM double: vLLM loads any
        path its operator names)."""
        m = ADDRESS.match(name)
        if not m or m.group("ref") == "latest":
            raise AdapterError(f"lora_name: '{name}' is not a valid name (a name, or name@step-N)")
        if name in self.trained:
            raise AdapterError(f"lora_name: '{name}' is a trained adapter here; pick another name")
        if not anywhere:
            path = checkpoints.under_root(self.root, path)  # a checkpoint of this server's root, never any path
            checkpoints.refuse_links(path)
        if not (path / "adapter_config.json").is_file():
            raise AdapterError(f"lora_path: no PEFT adapter (adapter_config.json) at {path}")
        with self.lock:
            if name in self.loaded:
                self._delete(name)
                self.loaded.discard(name)
            self._load(name, path)

    def unload(self, name: str) -> None:
        if name not in self.loaded:
            raise AdapterError(f"lora_name: '{name}' is not a loaded adapter")
        with self.lock:
            self._delete(name)
            self.loaded.discard(name)
            self.changed(name)

    def write_probe(self, rank: int) -> Path:
        """A LoRA adapter of `rank` written under the checkpoint root: a preflight asks each sampling host to load
        it, which proves the host sees this root at the same path. One per rank stays in memory, never sampled or
        listed (deleting PEFT's only adapter would leave it pointing at a deleted one)."""
        name = f"probe_r{rank}"
        folder = self.root / PROBES
        with self.lock:
            if self.peft is None:
                self.peft = get_peft_model(self.base.model, lora_config(LoraSettings(rank=rank, alpha=rank)), adapter_name=name)
                self._freeze_all()
            elif name not in self.peft.peft_config:
                self.peft.add_adapter(name, lora_config(LoraSettings(rank=rank, alpha=rank)))
                self._freeze_all()
            self.peft.save_pretrained(folder, selected_adapters=[name])
        return folder / name  # save_pretrained puts a non-default adapter in a subfolder named after it

    # --- internals ----------------------------------------------------------------------------------------
    def _load(self, name: str, path: Path, trainable: bool = False) -> None:
        checkpoints.refuse_links(path)
        with self.lock:
            self.changed(name)
            if self.peft is None:
                self.peft = PeftModel.from_pretrained(self.base.model, path, adapter_name=name, is_trainable=trainable)
            else:
                self.peft.load_adapter(path, adapter_name=name, is_trainable=trainable)
            self.peft.to(self.base.device)
            self._freeze_all()
            if not trainable:
                self.loaded.add(name)

    def _delete(self, name: str) -> None:
        """PEFT cannot run with no adapter left (its forward looks up the deleted one): the last one unwraps the
        base model instead, and the next adapter wraps it again."""
        if len(self.peft.peft_config) == 1:
            self.peft.unload()
            self.peft = None
        else:
            self.peft.delete_adapter(name)

    def _optimizer(self, name: str) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.trainable_parameters(name), lr=1e-5, betas=(0.9, 0.999), weight_decay=0.0)

    def _freeze_all(self) -> None:
        """Resident adapters are frozen and in eval mode (PEFT's mixed-adapter batches need it); a train step
        unfreezes its own adapter for its duration."""
        for p in self.peft.parameters():
            p.requires_grad_(False)
        self.peft.eval()
