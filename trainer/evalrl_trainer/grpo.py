"""The GRPO objective, token level, as one pure function.

Simplifications, stated: one optimizer step per batch (the sampler's logprobs are the "old" policy, or with
truncated importance sampling the trainer's own, which before the step's one update are the current ones); the
KLs use the k3 estimator; a sequence's advantage applies to every token the model produced.
"""
from dataclasses import dataclass
from typing import Literal

import torch

Aggregation = Literal["token-mean", "dr-grpo"]
Objective = Literal["grpo", "sft"]
# log(π_trainer / π_sampler) is bounded to ±20 before exp(), as verl does, so one wild token stays finite.
LOG_RATIO_BOUND = 20.0


@dataclass(frozen=True)
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    aggregation: Aggregation = "token-mean"
    # "sft": advantage-weighted log-likelihood of the produced tokens, for a warm start on demonstrations
    # (their "old" logprobs are unknown, so there is no ratio to clip).
    objective: Objective = "grpo"
    # Truncated importance sampling (TIS; verl's rollout IS, Yao et al. 2025): the sampler (vLLM) is another
    # engine than the trainer, so its logprobs differ from the trainer's for the same weights. With a cap, the
    # ratio's old policy is the trainer's own and each token's loss is weighted by min(π_trainer / π_sampler,
    # cap), which corrects for the sampler without letting one token's weight explode. 0: off.
    tis_imp_ratio_cap: float = 0.0


def grpo_loss(
    logp_BT: torch.Tensor,  # (B, T) logprob of each token under the policy being trained
    sampler_logp_BT: torch.Tensor,  # (B, T) logprob under the sampler (0 where mask is 0)
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
    # The trainer's pre-update logprobs: with one optimizer step per batch, the current ones, detached.
    trainer_old_BT = logp_BT.detach()
    # (B, T) log(π_trainer / π_sampler) of each token
    mismatch_BT = (trainer_old_BT - sampler_logp_BT).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    tis = cfg.tis_imp_ratio_cap > 0 and cfg.objective == "grpo"
    is_ratio_BT = torch.exp(mismatch_BT)
    is_weight_BT = is_ratio_BT.clamp(max=cfg.tis_imp_ratio_cap) if tis else is_ratio_BT
    log_ratio = logp_BT - (trainer_old_BT if tis else sampler_logp_BT)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv_BT
    clipped = torch.clamp(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high) * adv_BT
    policy_BT = -torch.minimum(unclipped, clipped) * (is_weight_BT if tis else 1.0)
    per_token = -logp_BT * adv_BT if cfg.objective == "sft" else policy_BT
    kl_BT = torch.zeros_like(per_token)
    if cfg.kl_coef > 0:
        assert ref_logp_BT is not None, "kl_coef > 0 needs the base model's logprobs"
        delta = ref_logp_BT - logp_BT
        kl_BT = torch.exp(delta) - delta - 1.0
        per_token = per_token + cfg.kl_coef * kl_BT
    loss = (per_token * mask).sum() / normaliser
    with torch.no_grad():
        tokens = mask.sum().clamp(min=1.0)
        # The sampler–trainer mismatch, whether or not TIS corrects it. Only sampled tokens have a sampler
        # logprob (a demonstration's are unknown), so an SFT step reports 0: not measured.
        sampled = mask if cfg.objective == "grpo" else torch.zeros_like(mask)
        capped_BT = (is_ratio_BT > cfg.tis_imp_ratio_cap).to(mask.dtype) if tis else torch.zeros_like(mask)
        metrics = {
            "clip_fraction": ((clipped < unclipped).to(mask.dtype) * mask).sum() / tokens,
            "approx_kl_old": ((torch.exp(-log_ratio) + log_ratio - 1.0) * mask).sum() / tokens,
            "kl_ref": (kl_BT * mask).sum() / tokens,
            # k3 estimate of KL(sampler ‖ trainer) over the sampler's tokens: r - 1 - log r, r = π_trainer/π_sampler
            "mismatch_kl": ((is_ratio_BT - mismatch_BT - 1.0) * sampled).sum() / tokens,
            "is_weight_mean": (is_weight_BT * sampled).sum() / tokens,  # the weight applied (TIS) or that would be
            "is_capped_fraction": (capped_BT * sampled).sum() / tokens,
            "tokens": mask.sum(),
        }
    return loss, metrics


def loss_normaliser(tokens: float, sequences: int, longest: int, aggregation: Aggregation) -> float:
    """token-mean: mean over the step's produced tokens; Dr.GRPO: a constant (sequences × longest), no length bias.

    Computed once for the whole step, so micro-batch losses add up to the step's loss exactly."""
    if aggregation == "token-mean":
        return max(tokens, 1.0)
    return float(sequences * longest)
