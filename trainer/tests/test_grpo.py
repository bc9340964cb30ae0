import math

import torch

from evalrl_trainer.grpo import LossConfig, grpo_loss, loss_normaliser
from evalrl_trainer.logprobs import token_logprobs
from evalrl_trainer.lora import LoraSettings, with_lora
from evalrl_trainer.train_step import Batch, StepConfig, train_step


def test_loss_and_gradient_match_a_hand_computed_reference():
    logp = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -1.2, -0.7]], requires_grad=True)
    old = torch.tensor([[-1.1, -0.9, -2.0], [-0.3, -1.0, -0.2]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -2.0])
    cfg = LossConfig(clip_low=0.2, clip_high=0.28)
    normaliser = loss_normaliser(mask, "token-mean", 3)
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
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert loss_normaliser(mask, "dr-grpo", 3) == 6.0
    assert loss_normaliser(mask, "token-mean", 3) == 3.0


def test_kl_term_is_zero_at_the_reference_and_positive_away_from_it():
    logp = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    cfg = LossConfig(kl_coef=0.5)
    _, at_ref = grpo_loss(logp, logp, mask, torch.zeros(1), cfg, 2.0, ref_logp_BT=logp)
    _, away = grpo_loss(logp, logp, mask, torch.zeros(1), cfg, 2.0, ref_logp_BT=logp - 0.5)
    assert at_ref["kl_ref"].item() == 0.0
    assert away["kl_ref"].item() > 0.0


def _sequence_logprob(model, batch: Batch) -> float:
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch.input_ids_BT, batch.attention_BT)
    return float((logp * batch.mask_BT).sum())


def _one_step(tiny_base, advantage: float):
    torch.manual_seed(0)
    model = with_lora(tiny_base.model, LoraSettings(rank=4, alpha=8))
    for name, p in model.named_parameters():  # LoRA B starts at 0: nudge it so A also gets gradient
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    ids = torch.randint(0, 1000, (1, 12))
    mask = torch.zeros(1, 12)
    mask[:, 6:] = 1
    with torch.no_grad():
        old, _ = token_logprobs(model, ids, torch.ones_like(ids))
    batch = Batch(ids, torch.ones_like(ids), mask, old * mask, torch.tensor([advantage]))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    lp_before = _sequence_logprob(model, batch)
    train_step(model, optimizer, batch, StepConfig(learning_rate=1e-2, max_grad_norm=100.0))
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    return changed, lp_before, _sequence_logprob(model, batch)


def test_only_lora_parameters_change(tiny_base):
    changed, _, _ = _one_step(tiny_base, 1.0)
    assert changed and all("lora_" in n for n in changed)


def test_positive_advantage_raises_the_sequence_logprob(tiny_base):
    _, before, after = _one_step(tiny_base, 1.0)
    assert after > before


def test_negative_advantage_lowers_the_sequence_logprob(tiny_base):
    _, before, after = _one_step(tiny_base, -1.0)
    assert after < before


def test_sft_objective_is_the_advantage_weighted_negative_log_likelihood():
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    old = torch.zeros_like(logp)  # unknown for demonstrations: ignored
    loss, _ = grpo_loss(logp, old, mask, torch.tensor([1.0]), LossConfig(objective="sft"), normaliser=2.0)
    assert math.isclose(loss.item(), (2.0 + 3.0) / 2)
    loss.backward()
    assert logp.grad.tolist() == [[0.0, -0.5, -0.5]]
