"""The GRPO objective, token level, as one pure function.

Simplifications, stated: one optimizer step per batch (the sampler's logprobs are the "old" policy); the KL
to the base model uses the k3 estimator; a sequence's advantage applies to every token the model produced.
"""
from dataclasses import dataclass
from typing import Literal

import torch

Aggregation = Literal["token-mean", "dr-grpo"]
Objective = Literal["grpo", "sft"]


@dataclass(frozen=True)
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    aggregation: Aggregation = "token-mean"
    # "sft": advantage-weighted log-likelihood of the produced tokens, for a warm start on demonstrations
    # (their "old" logprobs are unknown, so there is no ratio to clip).
    objective: Objective = "grpo"


def grpo_loss(
    logp_BT: torch.Tensor,  # (B, T) logprob of each token under the policy being trained
    old_logp_BT: torch.Tensor,  # (B, T) logprob under the sampler
    mask_BT: torch.Tensor,  # (B, T) 1 for tokens the model produced
    adv_B: torch.Tensor,  # (B,) one advantage per sequence
    cfg: LossConfig,
    normaliser: float,  # token-mean: produced tokens in the whole batch; dr-grpo: sequences × max tokens
    ref_logp_BT: torch.Tensor | None = None,  # (B, T) logprob under the base model, when kl_coef > 0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped-ratio policy loss (separate low/high clip), summed over produced tokens / normaliser.

    The normaliser is the whole batch's, so micro-batch losses add up to the batch loss exactly.
    """
    mask = mask_BT.to(logp_BT.dtype)
    adv_BT = adv_B[:, None].to(logp_BT.dtype)
    log_ratio = logp_BT - old_logp_BT
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv_BT
    clipped = torch.clamp(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high) * adv_BT
    per_token = -logp_BT * adv_BT if cfg.objective == "sft" else -torch.minimum(unclipped, clipped)
    kl_BT = torch.zeros_like(per_token)
    if cfg.kl_coef > 0:
        assert ref_logp_BT is not None, "kl_coef > 0 needs the base model's logprobs"
        delta = ref_logp_BT - logp_BT
        kl_BT = torch.exp(delta) - delta - 1.0
        per_token = per_token + cfg.kl_coef * kl_BT
    loss = (per_token * mask).sum() / normaliser
    with torch.no_grad():
        tokens = mask.sum().clamp(min=1.0)
        metrics = {
            "clip_fraction": ((clipped < unclipped).to(mask.dtype) * mask).sum() / tokens,
            "approx_kl_old": ((torch.exp(-log_ratio) + log_ratio - 1.0) * mask).sum() / tokens,
            "kl_ref": (kl_BT * mask).sum() / tokens,
            "tokens": mask.sum(),
        }
    return loss, metrics


def loss_normaliser(tokens: float, sequences: int, longest: int, aggregation: Aggregation) -> float:
    """token-mean: mean over the step's produced tokens; Dr.GRPO: a constant (sequences × longest), no length bias.

    Computed once for the whole step, so micro-batch losses add up to the step's loss exactly."""
    if aggregation == "token-mean":
        return max(tokens, 1.0)
    return float(sequences * longest)
