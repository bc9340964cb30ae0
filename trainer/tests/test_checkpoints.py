from pathlib import Path

import torch
from safetensors.torch import load_file

from evalrl_trainer import checkpoints
from evalrl_trainer.adapters import Adapters
from evalrl_trainer.base_model import load_base_model
from evalrl_trainer.lora import LoraSettings
from evalrl_trainer.grpo import LossConfig
from evalrl_trainer.train_step import Sequence, StepConfig
from evalrl_trainer.trainer import Trainer

LORA = LoraSettings(rank=4, alpha=8)
CFG = StepConfig(learning_rate=5e-3, max_grad_norm=1.0, loss=LossConfig(), tokens_per_micro_batch=24)


def make_batch(step: int):
    g = torch.Generator().manual_seed(100 + step)
    seqs = []
    for i in range(3):
        n = 10 + i
        ids = torch.randint(0, 1000, (n,), generator=g).tolist()
        mask = [0] * 4 + [1] * (n - 4)
        logprobs = [0.0] * 4 + (-torch.rand(n - 4, generator=g) * 3).tolist()
        seqs.append(Sequence(ids, mask, logprobs, [1.0, -0.5, -0.5][i]))
    return seqs


def fresh_trainer(model_folder: Path, root: Path) -> Trainer:
    adapters = Adapters(load_base_model(model_folder, root / ".models", device="cpu"), root, seed=7)
    adapters.resume_all()
    return Trainer(adapters)


def adapter_tensors(root: Path, step: int) -> dict[str, torch.Tensor]:
    folder = checkpoints.adapter_weights_path(root, "policy", step)
    return load_file(folder / "adapter_model.safetensors")


def test_restart_and_continue_is_bit_identical_to_an_uninterrupted_run(tiny_model_folder, tmp_path):
    straight = tmp_path / "straight"
    trainer = fresh_trainer(tiny_model_folder, straight)
    for step in (1, 2, 3):
        trainer.step("policy", step, make_batch(step), CFG, LORA)

    resumed = tmp_path / "resumed"
    trainer = fresh_trainer(tiny_model_folder, resumed)
    for step in (1, 2):
        trainer.step("policy", step, make_batch(step), CFG, LORA)
    (resumed / "policy" / "step-3.tmp").mkdir()  # a crash mid-checkpoint leaves this behind
    del trainer
    trainer = fresh_trainer(tiny_model_folder, resumed)  # a new server process, in effect
    assert trainer.adapters.trained == {} and trainer.progress("policy")["latest_step"] == 2  # restored on first use
    trainer.step("policy", 3, make_batch(3), CFG, LORA)

    a, b = adapter_tensors(straight, 3), adapter_tensors(resumed, 3)
    assert a.keys() == b.keys() and len(a) > 0
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert not torch.equal(adapter_tensors(straight, 1)[next(iter(a))], a[next(iter(a))])  # training moved it


def test_a_host_taking_over_continues_from_the_shared_checkpoint(tiny_model_folder, tmp_path):
    straight = tmp_path / "straight"
    trainer = fresh_trainer(tiny_model_folder, straight)
    for step in (1, 2, 3, 4):
        trainer.step("policy", step, make_batch(step), CFG, LORA)

    shared = tmp_path / "shared"
    host_a = fresh_trainer(tiny_model_folder, shared)
    host_b = fresh_trainer(tiny_model_folder, shared)  # up before the adapter had any checkpoint
    for step in (1, 2):
        host_a.step("policy", step, make_batch(step), CFG, LORA)
    host_b.step("policy", 3, make_batch(3), CFG, LORA)  # host A is gone: B takes over from step-2
    host_a.step("policy", 4, make_batch(4), CFG, LORA)  # and A back from B's step-3
    assert host_b.adapters.trained == {"policy": 3} and host_a.adapters.trained == {"policy": 4}

    for step in (3, 4):
        a, b = adapter_tensors(straight, step), adapter_tensors(shared, step)
        assert a.keys() == b.keys() and len(a) > 0
        for key in a:
            assert torch.equal(a[key], b[key]), (step, key)
    key = next(iter(a))
    assert not torch.equal(adapter_tensors(shared, 2)[key], adapter_tensors(shared, 4)[key])  # training moved it


def test_a_repeated_step_trains_nothing_and_another_request_for_it_is_refused(tiny_model_folder, tmp_path):
    import pytest

    from evalrl_trainer.trainer import StepConflict

    trainer = fresh_trainer(tiny_model_folder, tmp_path)
    first = trainer.step("policy", 1, make_batch(1), CFG, LORA, digest="request-1")
    weights = {n: p.detach().clone() for n, p in trainer.adapters.peft.named_parameters() if "lora_" in n}
    again = trainer.step("policy", 1, make_batch(1), CFG, LORA, digest="request-1")
    assert again["cached"] is True and first["cached"] is False
    assert again["loss"] == first["loss"]
    with pytest.raises(StepConflict, match="different request"):  # a pre-empting request is not "cached"
        trainer.step("policy", 1, make_batch(2), CFG, LORA, digest="request-2")
    for n, p in trainer.adapters.peft.named_parameters():
        if "lora_" in n:
            assert torch.equal(p, weights[n])
    assert checkpoints.complete_steps(tmp_path, "policy") == [0, 1]


def test_a_failed_checkpoint_save_restores_the_weights_and_optimizer(tiny_model_folder, tmp_path, monkeypatch):
    """The optimizer step happened but step-N never became whole: the retry must train from the old state."""
    import pytest

    trainer = fresh_trainer(tiny_model_folder, tmp_path)
    trainer.step("policy", 1, make_batch(1), CFG, LORA)
    before = trainer.adapters.snapshot("policy")
    real_save = checkpoints.save_checkpoint

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoints, "save_checkpoint", disk_full)
    with pytest.raises(OSError):
        trainer.step("policy", 2, make_batch(2), CFG, LORA)
    after = trainer.adapters.snapshot("policy")
    assert all(torch.equal(before["weights"][n], after["weights"][n]) for n in before["weights"])
    assert str(before["optimizer"]) == str(after["optimizer"])
    monkeypatch.setattr(checkpoints, "save_checkpoint", real_save)
    retried = trainer.step("policy", 2, make_batch(2), CFG, LORA)

    straight = fresh_trainer(tiny_model_folder, tmp_path / "straight")
    straight.step("policy", 1, make_batch(1), CFG, LORA)
    assert straight.step("policy", 2, make_batch(2), CFG, LORA)["sha256"] == retried["sha256"]


def test_steps_must_follow_the_latest_checkpoint(tiny_model_folder, tmp_path):
    import pytest

    from evalrl_trainer.trainer import StepConflict

    trainer = fresh_trainer(tiny_model_folder, tmp_path)
    trainer.step("policy", 1, make_batch(1), CFG, LORA)
    with pytest.raises(StepConflict, match="step-1"):
        trainer.step("policy", 3, make_batch(3), CFG, LORA)


def test_checkpoints_are_peft_folders_with_optimizer_and_metrics(tiny_model_folder, tmp_path):
    trainer = fresh_trainer(tiny_model_folder, tmp_path)
    metrics = trainer.step("policy", 1, make_batch(1), CFG, LORA)
    folder = checkpoints.step_dir(tmp_path, "policy", 1)
    assert (checkpoints.adapter_weights_path(tmp_path, "policy", 1) / "adapter_config.json").exists()
    assert (folder / "optimizer.pt").exists() and (folder / "rng.pt").exists()
    assert checkpoints.read_metrics(tmp_path, "policy", 1)["loss"] == metrics["loss"]
    for key in ("loss", "clip_fraction", "approx_kl_old", "kl_ref", "entropy", "grad_norm", "tokens", "seconds"):
        assert key in metrics


def test_a_cancelled_step_saves_nothing_and_can_be_run_again(tiny_model_folder, tmp_path):
    import threading
    import time

    import pytest

    from evalrl_trainer.trainer import Cancelled

    trainer = fresh_trainer(tiny_model_folder, tmp_path)
    trainer.step("policy", 1, make_batch(1), CFG, LORA)
    big = [Sequence(list(range(5, 69)), [0] * 8 + [1] * 56, [-1.0] * 64, 1.0)] * 200

    def cancel_when_running():
        while not trainer.progress("policy")["running"]:
            time.sleep(0.001)
        assert trainer.progress("policy")["step"] == 2
        trainer.cancel("policy")

    watcher = threading.Thread(target=cancel_when_running)
    watcher.start()
    before = {n: p.detach().clone() for n, p in trainer.adapters.peft.named_parameters() if "lora_" in n}
    with pytest.raises(Cancelled):
        trainer.step("policy", 2, big, StepConfig(learning_rate=5e-3, max_grad_norm=1.0, loss=LossConfig(), tokens_per_micro_batch=64), LORA)
    watcher.join()
    assert checkpoints.complete_steps(tmp_path, "policy") == [0, 1]
    for n, p in trainer.adapters.peft.named_parameters():
        if "lora_" in n:
            assert torch.equal(p, before[n])
    assert trainer.step("policy", 2, make_batch(2), CFG, LORA)["cached"] is False


def test_init_seed_makes_differently_named_adapters_start_and_train_alike(tiny_model_folder, tmp_path):
    seeded = LoraSettings(rank=4, alpha=8, init_seed="7:policy")
    trainer = fresh_trainer(tiny_model_folder, tmp_path)
    a = trainer.step("run-a", 1, make_batch(1), CFG, seeded)
    b = trainer.step("run-b", 1, make_batch(1), CFG, seeded)
    c = trainer.step("run-c", 1, make_batch(1), CFG, LORA)  # no init seed: its name seeds it
    assert a["sha256"] == b["sha256"] != c["sha256"]
    assert a["checkpoint"].endswith("run-a/step-1/adapter/run-a")
    cached = trainer.step("run-a", 1, make_batch(1), CFG, seeded)
    assert cached["cached"] is True and cached["sha256"] == a["sha256"]


def test_a_runs_retention_keeps_its_newest_steps_and_step_0(tiny_model_folder, tmp_path):
    trainer = fresh_trainer(tiny_model_folder, tmp_path)
    for step in (1, 2, 3, 4):
        trainer.step("policy", step, make_batch(step), CFG, LORA, keep=2)
    assert checkpoints.complete_steps(tmp_path, "policy") == [0, 3, 4]


def test_a_new_adapter_can_start_from_another_adapters_checkpoint(tiny_model_folder, tmp_path):
    import pytest

    from evalrl_trainer.adapters import AdapterError

    trainer = fresh_trainer(tiny_model_folder, tmp_path)
    warm = trainer.step("warm", 1, make_batch(1), CFG, LORA)
    forked = trainer.step("grpo", 1, make_batch(2), CFG, LoraSettings(rank=8, alpha=8, init_from="warm@step-1"))
    start = load_file(checkpoints.adapter_weights_path(tmp_path, "grpo", 0) / "adapter_model.safetensors")
    source = load_file(checkpoints.adapter_weights_path(tmp_path, "warm", 1) / "adapter_model.safetensors")
    assert start.keys() == source.keys() and all(torch.equal(start[k], source[k]) for k in start)  # rank 4, as warm
    assert forked["sha256"] != warm["sha256"]  # and it trains on from there
    with pytest.raises(AdapterError, match="no checkpoint step-9"):
        trainer.step("other", 1, make_batch(1), CFG, LoraSettings(init_from="warm@step-9"))
