"""One GRPO (or SFT) LoRA optimizer step over sampled sequences, in micro-batches sized by a token budget."""
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch

from .grpo import LossConfig, grpo_loss, loss_normaliser
from .logprobs import causal_lm, token_logprobs


@dataclass
class Sequence:
    token_ids: list[int]
    mask: list[int]  # 1 for tokens the model produced (trained on), 0 for prompt tokens
    logprobs: list[float]  # the sampler's logprob of each produced token (0 elsewhere)
    advantage: float


@dataclass
class Batch:
    input_ids_BT: torch.Tensor  # (B, T) right-padded token ids
    mask_BT: torch.Tensor  # (B, T) 1 for tokens the model produced
    sampler_logp_BT: torch.Tensor  # (B, T) sampler logprobs (0 where mask is 0)
    adv_B: torch.Tensor  # (B,)


@dataclass(frozen=True)
class StepConfig:
    learning_rate: float
    max_grad_norm: float
    loss: LossConfig
    # Padded tokens per forward/backward: what bounds the step's memory, whatever lengths were sampled. A
    # sequence longer than this runs alone with activation checkpointing (each decoder layer keeps only its
    # input and recomputes the rest in the backward pass): about a third more compute for ~10× less memory.
    tokens_per_micro_batch: int = 1024


def plan_micro_batches(lengths: list[int], tokens_per_micro_batch: int) -> list[list[int]]:
    """Sequence indices grouped into micro-batches, longest first, while rows × longest ≤ the budget.
    Similar lengths share a micro-batch, so little is padded; a sequence over the budget goes alone."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    plan: list[list[int]] = []
    for i in order:
        if plan and (len(plan[-1]) + 1) * lengths[plan[-1][0]] <= tokens_per_micro_batch:
            plan[-1].append(i)
        else:
            plan.append([i])
    return plan


def collate(sequences: list[Sequence], device: torch.device) -> Batch:
    """Right-pads sequences to the longest of them (not to the context length)."""
    T = max(len(s.token_ids) for s in sequences)
    B = len(sequences)
    ids = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T))
    old = torch.zeros((B, T))
    for i, s in enumerate(sequences):
        n = len(s.token_ids)
        ids[i, :n] = torch.tensor(s.token_ids)
        mask[i, :n] = torch.tensor(s.mask, dtype=torch.float32)
        old[i, :n] = torch.tensor(s.logprobs, dtype=torch.float32) * mask[i, :n]
    adv = torch.tensor([s.advantage for s in sequences], dtype=torch.float32)
    return Batch(ids.to(device), mask.to(device), old.to(device), adv.to(device))


# Token-weighted means over the step's produced tokens, summed over micro-batches by their share of them.
TOKEN_MEANS = ("clip_fraction", "approx_kl_old", "kl_ref", "mismatch_kl", "is_weight_mean", "is_capped_fraction")


@contextmanager
def activation_checkpointing(model, enabled: bool):
    lm = causal_lm(model)
    if enabled:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        yield
    finally:
        if enabled:
            lm.gradient_checkpointing_disable()


def train_step(
    model,
    optimizer: torch.optim.Optimizer,
    sequences: list[Sequence],
    cfg: StepConfig,
    on_micro_batch: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, float]:
    """Accumulates the loss over micro-batches, clips the LoRA gradient norm, takes one optimizer step.

    A step with no signal (every advantage 0, no KL term) leaves the weights and the optimizer as they were:
    its gradient is 0, but Adam's momentum would still move every weight by up to the learning rate."""
    started = time.perf_counter()
    tokens = float(sum(sum(s.mask) for s in sequences))
    if cfg.loss.kl_coef == 0 and all(s.advantage == 0 for s in sequences):
        return {"loss": 0.0, **dict.fromkeys(TOKEN_MEANS, 0.0), "entropy": 0.0, "grad_norm": 0.0, "update_norm": 0.0,
                "tokens": tokens, "micro_batches": 0, "no_signal": True, "seconds": time.perf_counter() - started}  # fmt: skip
    device = next(model.parameters()).device
    for group in optimizer.param_groups:
        group["lr"] = cfg.learning_rate
    trainable = [p for p in model.parameters() if p.requires_grad]
    longest = max(len(s.token_ids) for s in sequences)
    normaliser = loss_normaliser(tokens, len(sequences), longest, cfg.loss.aggregation)
    plan = plan_micro_batches([len(s.token_ids) for s in sequences], cfg.tokens_per_micro_batch)
    optimizer.zero_grad(set_to_none=True)
    totals = {"loss": 0.0, **dict.fromkeys(TOKEN_MEANS, 0.0), "entropy": 0.0}
    model.train()
    for i, indices in enumerate(plan):
        batch = collate([sequences[j] for j in indices], device)
        with activation_checkpointing(model, batch.input_ids_BT.numel() > cfg.tokens_per_micro_batch):
            ref = None
            if cfg.loss.kl_coef > 0:
                with torch.no_grad(), model.disable_adapter():
                    ref, _ = token_logprobs(model, batch.input_ids_BT, needed_BT=batch.mask_BT)
            logp, entropy = token_logprobs(model, batch.input_ids_BT, needed_BT=batch.mask_BT, with_entropy=True)
            loss, m = grpo_loss(logp, batch.sampler_logp_BT, batch.mask_BT, batch.adv_B, cfg.loss, normaliser, ref)
            loss.backward()
            share = float(m["tokens"]) / max(tokens, 1.0)  # token-weighted means across micro-batches
            totals["loss"] += float(loss.detach())
            for key in TOKEN_MEANS:
                totals[key] += float(m[key]) * share
            totals["entropy"] += float((entropy * batch.mask_BT).sum()) / max(tokens, 1.0)
        on_micro_batch(i + 1, len(plan))
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm)
    if not torch.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise FloatingPointError(f"non-finite gradient norm {float(grad_norm)}; step skipped")
    before = [p.detach().clone() for p in trainable]
    optimizer.step()
    # How far the weights moved: an adapter that never leaves its initial weights is a defect to see.
    update_norm = math.sqrt(sum(float((p.detach() - b).pow(2).sum()) for p, b in zip(trainable, before)))
    return {
        **totals,
        "grad_norm": float(grad_norm),
        "update_norm": update_norm,
        "tokens": tokens,
        "micro_batches": len(plan),
        "no_signal": False,
        "seconds": time.perf_counter() - started,
    }

