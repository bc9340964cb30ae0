"""One GRPO LoRA optimizer step over a batch of sampled sequences, micro-batched to bound memory."""
import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .grpo import LossConfig, grpo_loss, loss_normaliser
from .logprobs import token_logprobs


@dataclass
class Batch:
    input_ids_BT: torch.Tensor  # (B, T) right-padded token ids
    attention_BT: torch.Tensor  # (B, T) 1 for real tokens
    mask_BT: torch.Tensor  # (B, T) 1 for tokens the model produced
    old_logp_BT: torch.Tensor  # (B, T) sampler logprobs (0 where mask is 0)
    adv_B: torch.Tensor  # (B,)


@dataclass(frozen=True)
class StepConfig:
    learning_rate: float = 1e-5
    max_grad_norm: float = 1.0
    micro_batch: int = 4
    loss: LossConfig = LossConfig()


def train_step(
    model,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: StepConfig,
    on_micro_batch: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, float]:
    """Accumulates the loss over micro-batches, clips the LoRA gradient norm, takes one optimizer step."""
    started = time.perf_counter()
    device = next(model.parameters()).device
    for group in optimizer.param_groups:
        group["lr"] = cfg.learning_rate
    trainable = [p for p in model.parameters() if p.requires_grad]
    normaliser = loss_normaliser(batch.mask_BT, cfg.loss.aggregation, batch.input_ids_BT.shape[1])
    optimizer.zero_grad(set_to_none=True)
    totals = {"loss": 0.0, "clip_fraction": 0.0, "approx_kl_old": 0.0, "kl_ref": 0.0, "entropy": 0.0}
    tokens = float(batch.mask_BT.sum())
    n = batch.input_ids_BT.shape[0]
    steps = math.ceil(n / cfg.micro_batch)
    model.train()
    for i, start in enumerate(range(0, n, cfg.micro_batch)):
        sl = slice(start, start + cfg.micro_batch)
        ids, attn = batch.input_ids_BT[sl].to(device), batch.attention_BT[sl].to(device)
        mask = batch.mask_BT[sl].to(device)
        ref = None
        if cfg.loss.kl_coef > 0:
            with torch.no_grad(), model.disable_adapter():
                ref, _ = token_logprobs(model, ids, attn, needed_BT=mask)
        logp, entropy = token_logprobs(model, ids, attn, with_entropy=True, needed_BT=mask)
        loss, m = grpo_loss(
            logp, batch.old_logp_BT[sl].to(device), mask, batch.adv_B[sl].to(device), cfg.loss, normaliser, ref
        )
        loss.backward()
        share = float(m["tokens"]) / max(tokens, 1.0)  # token-weighted means across micro-batches
        totals["loss"] += float(loss.detach())
        for key in ("clip_fraction", "approx_kl_old", "kl_ref"):
            totals[key] += float(m[key]) * share
        totals["entropy"] += float((entropy * mask).sum()) / max(tokens, 1.0)
        on_micro_batch(i + 1, steps)
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm)
    if not torch.isfinite(grad_norm):
        optimizer.zero_grad(set_to_none=True)
        raise FloatingPointError(f"non-finite gradient norm {float(grad_norm)}; step skipped")
    optimizer.step()
    return {**totals, "grad_norm": float(grad_norm), "tokens": tokens, "seconds": time.perf_counter() - started}
