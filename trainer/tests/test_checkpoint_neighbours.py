"""Issue 47: hostile neighbours on the checkpoint folder (paths for names, symlinks, split-brain, 409s that say why)."""
import json
import os
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from evalrl_trainer import checkpoints
from evalrl_trainer import trainer as trainer_module
from evalrl_trainer.adapters import AdapterError, Adapters
from evalrl_trainer.trainer import StepConflict, Trainer

from test_checkpoints import CFG, LORA, make_batch


def test_an_adapter_is_a_name_never_a_path(tiny_base, tmp_path):
    """Before: an absolute path as `adapter` answered with the SHA-256 of whatever its step-5 linked to."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"not yours")
    weights = outside / "step-5" / "adapter"
    weights.mkdir(parents=True)
    (outside / "step-5" / "metrics.json").write_text(json.dumps({"step": 5}))
    os.symlink(secret, weights / "adapter_model.safetensors")
    trainer = Trainer(Adapters(tiny_base, root))
    for name in (str(outside), "../outside", "a/../../outside"):
        with pytest.raises(AdapterError):
            trainer.step(name, 5, make_batch(5), CFG, LORA)
        with pytest.raises(AdapterError):
            trainer.progress(name)
        with pytest.raises(AdapterError):
            trainer.cancel(name)
    # A symlink planted as an adapter folder under the root is refused too.
    root.mkdir(exist_ok=True)
    os.symlink(outside, root / "planted")
    with pytest.raises(AdapterError):
        trainer.step("planted", 5, make_batch(5), CFG, LORA)


def test_describe_hashes_only_regular_files_under_the_root(tmp_path):
    weights = tmp_path / "policy" / "step-1" / "adapter"
    weights.mkdir(parents=True)
    secret = tmp_path.parent / f"{tmp_path.name}-secret"
    secret.write_bytes(b"not yours")
    os.symlink(secret, weights / "adapter_model.safetensors")
    with pytest.raises(AdapterError):
        checkpoints.describe(tmp_path, "policy", 1)


def test_load_lora_adapter_takes_only_folders_under_the_checkpoint_root(tiny_base, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "adapter_config.json").write_text("{}")
    adapters = Adapters(tiny_base, tmp_path / "root")
    with pytest.raises(AdapterError, match="not under"):
        adapters.load_external("policy@step-5", outside)  # would pre-plant a step a publisher trusts
    assert "policy@step-5" not in adapters.loaded


def test_a_dead_writers_temporary_folders_go_only_once_its_lease_is_stale(tiny_base, tmp_path):
    """Before: a starting server deleted `step-N.tmp` even while another host was writing it."""
    folder = tmp_path / "policy"
    (folder / "step-3.tmp").mkdir(parents=True)
    (folder / "step-4.tmp").mkdir()
    (folder / "step-3.lease").write_text(json.dumps({"holder": "hostA", "expires": time.time() - 1}))
    (folder / "step-4.lease").write_text(json.dumps({"holder": "hostB", "expires": time.time() + 600}))
    Adapters(tiny_base, tmp_path).resume_all()
    assert not (folder / "step-3.tmp").exists()  # its writer died: its lease expired
    assert (folder / "step-4.tmp").exists()  # still being written by a live host


def hold_in_training(monkeypatch, gate: threading.Event, entered: threading.Event):
    """The first train step of the patched module waits at `gate` (a GPU worker stalled mid-step)."""
    real = trainer_module.train_step
    first = threading.Event()

    def train_step(*args, **kwargs):
        if not first.is_set():
            first.set()
            entered.set()
            assert gate.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "train_step", train_step)


def two_hosts(tiny_model_folder, root: Path, lease_s: float):
    from evalrl_trainer.base_model import load_base_model

    def host(name):
        adapters = Adapters(load_base_model(tiny_model_folder, root / ".models", device="cpu"), root, seed=7)
        adapters.resume_all()
        trainer = Trainer(adapters)
        trainer.lease_s, trainer.holder = lease_s, name
        return trainer

    return host("hostA"), host("hostB")


def test_split_brain_one_host_per_step_and_the_first_checkpoint_wins(tiny_model_folder, tmp_path, monkeypatch):
    """Before: host B trained step 1 while host A was still training it, both writing `step-1.tmp`. Now B gets a
    retryable StepBusy while A's lease is live; once A stalls past its lease B takes over, and A, finishing
    late, discards its work and answers with B's checkpoint (same request) instead of replacing it."""
    a, b = two_hosts(tiny_model_folder, tmp_path, lease_s=600)
    gate, entered = threading.Event(), threading.Event()
    hold_in_training(monkeypatch, gate, entered)
    results: dict = {}
    t = threading.Thread(target=lambda: results.update(a=a.step("policy", 1, make_batch(1), CFG, LORA, digest="d1")))
    t.start()
    assert entered.wait(120)
    with pytest.raises(Exception, match="being trained by hostA"):  # StepBusy: a 503
        b.step("policy", 1, make_batch(1), CFG, LORA, digest="d1")
    a.lease_s = 0.0  # A stalls past its lease: the next host takes the step over
    lease = checkpoints.lease_path(tmp_path, "policy", 1)
    lease.write_text(json.dumps({"holder": "hostA", "expires": time.time() - 1}))
    won = b.step("policy", 1, make_batch(1), CFG, LORA, digest="d1")
    assert won["cached"] is False
    gate.set()
    t.join(120)
    assert results["a"]["cached"] is True and results["a"]["loss"] == won["loss"]
    assert a.adapters.trained["policy"] == 1
    assert not list((tmp_path / "policy").glob("step-1.tmp*")) and not lease.exists()


def test_a_conflicting_retry_names_the_values_that_trained_the_step(tiny_model_folder, tmp_path):
    """Before: "step-1 of 'policy' was trained from a different request", with no hint of what differed."""
    from test_checkpoints import fresh_trainer

    trainer = fresh_trainer(tiny_model_folder, tmp_path)
    trainer.step("policy", 1, make_batch(1), CFG, LORA, digest="first")
    with pytest.raises(StepConflict, match=r"learning_rate: step-1 was trained with 0\.005, this request asks 0\.01"):
        trainer.step("policy", 1, make_batch(1), replace(CFG, learning_rate=1e-2), LORA, digest="second")
    with pytest.raises(StepConflict, match="the same hyperparameters but other sequences"):
        trainer.step("policy", 1, make_batch(2), CFG, LORA, digest="third")
    assert checkpoints.read_metrics(tmp_path, "policy", 1)["request"]["learning_rate"] == CFG.learning_rate


def test_adapters_are_restored_on_first_use_and_the_least_recently_used_is_evicted(tiny_model_folder, tmp_path):
    """Before: resume_all restored every adapter ever trained, with its optimizer, at startup."""
    from evalrl_trainer.base_model import load_base_model

    def host():
        adapters = Adapters(load_base_model(tiny_model_folder, tmp_path / ".models", device="cpu"), tmp_path, seed=7)
        adapters.max_trained = 1
        return adapters, adapters.resume_all(), Trainer(adapters)

    adapters, _, trainer = host()
    trainer.step("p1", 1, make_batch(1), CFG, LORA)
    trainer.step("p2", 1, make_batch(1), CFG, LORA)
    assert adapters.trained == {"p2": 1}  # p1 evicted: its state is on disk
    adapters, found, trainer = host()  # a restart
    assert found == {"p1": 1, "p2": 1} and adapters.trained == {}
    assert trainer.progress("p1")["latest_step"] == 1 and adapters.trained == {}
    assert adapters.resolve("p1") == "p1" and adapters.trained == {"p1": 1}  # a sampling request restores it
    trainer.step("p2", 2, make_batch(2), CFG, LORA)  # a train step restores p2, evicting the idle p1
    assert adapters.trained == {"p2": 2}


def test_a_lease_of_a_process_of_this_host_that_is_gone_is_stale_at_once():
    """A model server SIGKILLed mid-step and restarted on the same host takes its step over without waiting out
    the lease; a live process's lease, or another host's, stays live until it expires."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    here, later = socket.gethostname(), time.time() + 600
    assert not checkpoints.lease_live({"holder": "x", "host": here, "pid": gone.pid, "expires": later})
    assert checkpoints.lease_live({"holder": "x", "host": here, "pid": os.getpid(), "expires": later})
    assert checkpoints.lease_live({"holder": "x", "host": "another-host", "pid": gone.pid, "expires": later})
    assert not checkpoints.lease_live({"holder": "x", "host": "another-host", "pid": 1, "expires": time.time() - 1})
