import math

import torch

from evalrl_trainer.base_model import load_base_model
from evalrl_trainer.grpo import LossConfig, grpo_loss, loss_normaliser
from evalrl_trainer.logprobs import token_logprobs
from evalrl_trainer.lora import LoraSettings, with_lora
from evalrl_trainer.train_step import Sequence, StepConfig, plan_micro_batches, train_step


def test_loss_and_gradient_match_a_hand_computed_reference():
    logp = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -1.2, -0.7]], requires_grad=True)
    old = torch.tensor([[-1.1, -0.9, -2.0], [-0.3, -1.0, -0.2]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -2.0])
    cfg = LossConfig(clip_low=0.2, clip_high=0.28)
    normaliser = loss_normaliser(float(mask.sum()), 2, 3, "token-mean")
    assert normaliser == 5.0
    loss, metrics = grpo_loss(logp, old, mask, adv, cfg, normaliser)
    loss.backward()

    # By hand: per token, -min(r·A, clip(r, 0.8, 1.28)·A); gradient wrt logp is -r·A where unclipped wins, else 0.
    expected_loss, expected_grad, clipped = 0.0, [[0.0] * 3, [0.0] * 3], 0
    for b in range(2):
        for t in range(3):
            if mask[b, t] == 0:
                continue
            r = math.exp(logp[b, t].item() - old[b, t].item())
            a = adv[b].item()
            unclipped, clip = r * a, min(max(r, 0.8), 1.28) * a
            expected_loss += -min(unclipped, clip) / 5
            if unclipped <= clip:
                expected_grad[b][t] = -r * a / 5
            else:
                clipped += 1
    assert math.isclose(loss.item(), expected_loss, rel_tol=1e-6)
    assert torch.allclose(logp.grad, torch.tensor(expected_grad), atol=1e-7)
    assert math.isclose(metrics["clip_fraction"].item(), clipped / 5, rel_tol=1e-6)
    assert clipped > 0  # the example exercises both branches


def test_dr_grpo_uses_a_constant_normaliser():
    assert loss_normaliser(3.0, 2, 3, "dr-grpo") == 6.0
    assert loss_normaliser(3.0, 2, 3, "token-mean") == 3.0


def test_kl_term_is_zero_at_the_reference_and_positive_away_from_it():
    logp = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    cfg = LossConfig(kl_coef=0.5)
    _, at_ref = grpo_loss(logp, logp, mask, torch.zeros(1), cfg, 2.0, ref_logp_BT=logp)
    _, away = grpo_loss(logp, logp, mask, torch.zeros(1), cfg, 2.0, ref_logp_BT=logp - 0.5)
    assert at_ref["kl_ref"].item() == 0.0
    assert away["kl_ref"].item() > 0.0


def _sequence_logprob(model, ids: torch.Tensor, mask: torch.Tensor) -> float:
    with torch.no_grad():
        logp, _ = token_logprobs(model, ids, needed_BT=mask)
    return float((logp * mask).sum())


def _one_step(tiny_base, advantage: float, tokens_per_micro_batch: int = 1024):
    torch.manual_seed(0)
    model = with_lora(tiny_base.model, LoraSettings(rank=4, alpha=8))
    for name, p in model.named_parameters():  # LoRA B starts at 0: nudge it so A also gets gradient
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    ids = torch.randint(0, 1000, (1, 12))
    mask = torch.zeros(1, 12)
    mask[:, 6:] = 1
    with torch.no_grad():
        old, _ = token_logprobs(model, ids)
    sequence = Sequence(ids[0].tolist(), mask[0].int().tolist(), (old * mask)[0].tolist(), advantage)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    lp_before = _sequence_logprob(model, ids, mask)
    cfg = StepConfig(learning_rate=1e-2, max_grad_norm=100.0, loss=LossConfig(), tokens_per_micro_batch=tokens_per_micro_batch)
    train_step(model, optimizer, [sequence], cfg)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    return changed, lp_before, _sequence_logprob(model, ids, mask)


def test_logprobs_equal_a_plain_full_vocabulary_computation(tiny_base):
    """Chunked, masked, right-padded logprobs are the plain log-softmax over the whole vocabulary."""
    ids = torch.randint(0, 1000, (2, 20))
    needed = torch.zeros(2, 20)
    needed[0, 5:] = 1
    needed[1, 3:12] = 1  # the second row is "padded" after 12: those positions must not matter
    with torch.no_grad():
        logp, entropy = token_logprobs(tiny_base.model, ids, needed_BT=needed, with_entropy=True)
        logits = tiny_base.model(input_ids=ids).logits.float()
    plain = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    assert torch.allclose(logp[:, 1:] * needed[:, 1:], plain * needed[:, 1:], atol=1e-5)
    assert logp[needed == 0].abs().sum() == 0 and entropy[needed == 1].min() > 0


def test_micro_batches_follow_the_token_budget_longest_first():
    assert plan_micro_batches([10, 40, 20, 20, 5], 45) == [[1], [2, 3], [0, 4]]
    assert plan_micro_batches([100], 10) == [[0]]  # over the budget: alone


def test_a_step_is_the_same_whatever_the_micro_batching(tiny_model_folder, tmp_path):
    """Activation checkpointing of an over-budget sequence changes memory, not the update."""
    fresh = lambda: load_base_model(tiny_model_folder, tmp_path, device="cpu")  # noqa: E731
    _, before, whole = _one_step(fresh(), 1.0, tokens_per_micro_batch=1024)
    _, _, checkpointed = _one_step(fresh(), 1.0, tokens_per_micro_batch=4)
    assert whole != before and math.isclose(whole, checkpointed, rel_tol=1e-5)


def test_only_lora_parameters_change(tiny_base):
    changed, _, _ = _one_step(tiny_base, 1.0)
    assert changed and all("lora_" in n for n in changed)


def test_positive_advantage_raises_the_sequence_logprob(tiny_base):
    _, before, after = _one_step(tiny_base, 1.0)
    assert after > before


def test_negative_advantage_lowers_the_sequence_logprob(tiny_base):
    _, before, after = _one_step(tiny_base, -1.0)
    assert after < before


def test_a_step_without_signal_leaves_weights_and_optimizer_as_they_were(tiny_base):
    """After a step with signal Adam has momentum; a step whose advantages are all 0 must not spend it."""
    torch.manual_seed(0)
    model = with_lora(tiny_base.model, LoraSettings(rank=4, alpha=8))
    ids = torch.randint(0, 1000, (12,)).tolist()
    mask = [0] * 6 + [1] * 6
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    cfg = StepConfig(learning_rate=1e-2, max_grad_norm=100.0, loss=LossConfig(objective="sft"))
    moved = train_step(model, optimizer, [Sequence(ids, mask, [0.0] * 12, 1.0)], cfg)
    weights = [p.detach().clone() for p in trainable]
    moments = {k: v.clone() for k, v in optimizer.state[trainable[0]].items()}
    idle = train_step(model, optimizer, [Sequence(ids, mask, [0.0] * 12, 0.0)] * 2, cfg)
    assert all(torch.equal(p, w) for p, w in zip(trainable, weights))
    assert all(torch.equal(optimizer.state[trainable[0]][k], v) for k, v in moments.items())
    assert moved["update_norm"] > 0 and not moved["no_signal"]
    assert idle["no_signal"] and idle["update_norm"] == 0 and idle["tokens"] == 12


def test_sft_objective_is_the_advantage_weighted_negative_log_likelihood():
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    old = torch.zeros_like(logp)  # unknown for demonstrations: ignored
    loss, _ = grpo_loss(logp, old, mask, torch.tensor([1.0]), LossConfig(objective="sft"), normaliser=2.0)
    assert math.isclose(loss.item(), (2.0 + 3.0) / 2)
    loss.backward()
    assert logp.grad.tolist() == [[0.0, -0.5, -0.5]]


def test_tis_weights_each_token_by_the_trainer_sampler_ratio_capped():
    """With a cap the ratio's old policy is the trainer's own logprobs (ratio 1, nothing clipped) and each
    token's gradient is -min(π_trainer / π_sampler, cap)·A / normaliser."""
    logp = torch.tensor([[-1.0, -0.5, -2.0]], requires_grad=True)
    sampler = torch.tensor([[-1.0, -0.5 - math.log(5.0), -2.0 + math.log(2.0)]])  # π_trainer / π_sampler: 1, 5, 0.5
    loss, metrics = grpo_loss(logp, sampler, torch.ones(1, 3), torch.tensor([2.0]), LossConfig(tis_imp_ratio_cap=2.0), 3.0)
    loss.backward()
    weights = torch.tensor([[1.0, 2.0, 0.5]])  # the 5 is capped at 2
    assert math.isclose(loss.item(), -(weights.sum() * 2.0 / 3.0).item(), rel_tol=1e-6)
    assert torch.allclose(logp.grad, -weights * 2.0 / 3.0)
    assert math.isclose(metrics["is_weight_mean"].item(), 3.5 / 3, rel_tol=1e-6)
    assert math.isclose(metrics["is_capped_fraction"].item(), 1 / 3, rel_tol=1e-6)
    assert metrics["clip_fraction"].item() == 0 and metrics["approx_kl_old"].item() == 0


def test_tis_is_the_identity_and_the_mismatch_zero_when_sampler_and_trainer_agree():
    trainer = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -1.2, -0.7]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    runs = []
    for cap in (0.0, 2.0):
        logp = trainer.clone().requires_grad_(True)
        loss, metrics = grpo_loss(logp, trainer, mask, torch.tensor([1.0, -2.0]), LossConfig(tis_imp_ratio_cap=cap), 5.0)
        loss.backward()
        runs.append((loss.item(), logp.grad, metrics))
    (off_loss, off_grad, off), (on_loss, on_grad, on) = runs
    assert on_loss == off_loss and torch.equal(on_grad, off_grad)
    for m in (off, on):
        assert (m["mismatch_kl"].item(), m["is_weight_mean"].item(), m["is_capped_fraction"].item()) == (0.0, 1.0, 0.0)


def test_the_mismatch_is_positive_when_they_differ_whether_or_not_tis_is_on():
    trainer = torch.tensor([[-1.0, -0.5]])
    sampler = torch.tensor([[-1.3, -0.2]])
    kls = [
        grpo_loss(trainer, sampler, torch.ones(1, 2), torch.ones(1), LossConfig(tis_imp_ratio_cap=cap), 2.0)[1]["mismatch_kl"].item()
        for cap in (0.0, 2.0)
    ]
    by_hand = sum(math.exp(d) - d - 1 for d in (0.3, -0.3)) / 2  # k3 of KL(sampler ‖ trainer)
    assert by_hand > 0 and kls[0] == kls[1] and math.isclose(kls[0], by_hand, rel_tol=1e-5)


def test_a_step_reports_the_mismatch_it_corrects(tiny_base):
    """A sampler less sure of its tokens than the trainer by 1 nat each: r = e on every token, capped at 2."""
    torch.manual_seed(0)
    model = with_lora(tiny_base.model, LoraSettings(rank=4, alpha=8))
    ids = torch.randint(0, 1000, (1, 12))
    mask = torch.zeros(1, 12)
    mask[:, 6:] = 1
    with torch.no_grad():
        trainer, _ = token_logprobs(model, ids)
    sequence = Sequence(ids[0].tolist(), mask[0].int().tolist(), ((trainer - 1.0) * mask)[0].tolist(), 1.0)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    cfg = StepConfig(learning_rate=1e-2, max_grad_norm=100.0, loss=LossConfig(tis_imp_ratio_cap=2.0))
    metrics = train_step(model, optimizer, [sequence], cfg)
    assert math.isclose(metrics["mismatch_kl"], math.e - 2.0, rel_tol=1e-4)
    assert metrics["is_capped_fraction"] == 1.0 and math.isclose(metrics["is_weight_mean"], 2.0, rel_tol=1e-6)
    assert metrics["update_norm"] > 0
