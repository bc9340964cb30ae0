"""Per-token logprobs and entropy of a causal LM, computed a micro-batch at a time."""
import torch
import torch.nn.functional as F


def token_logprobs(
    model,
    input_ids_BT: torch.Tensor,
    attention_BT: torch.Tensor,
    with_entropy: bool = False,
    needed_BT: torch.Tensor | None = None,
):
    """logp_BT[b, t] = log p(input_ids[b, t] | input_ids[b, :t]); position 0 has no prediction and is 0.

    `needed_BT` marks the tokens whose logprob is used (the ones the model produced): the output layer then
    runs only at the positions that predict them, and the rest stay 0. In multi-turn episodes most tokens are
    prompt, and vocab × tokens is the largest product of the step. cross_entropy is the fused log-softmax +
    gather, in fp32 inside it only. Entropy is a metric: no gradient.
    """
    B, T = input_ids_BT.shape
    # Prediction positions: p predicts token p + 1.
    keep = torch.arange(T - 1, device=input_ids_BT.device)
    if needed_BT is not None:
        keep = torch.nonzero(needed_BT[:, 1:].any(0)).squeeze(-1)
    # No KV cache in training; an all-ones mask is dropped so attention can take the fused causal kernel.
    mask = None if bool(attention_BT.all()) else attention_BT
    logits_BKV = model(input_ids=input_ids_BT, attention_mask=mask, use_cache=False, logits_to_keep=keep).logits
    V = logits_BKV.shape[-1]
    targets_BK = input_ids_BT[:, keep + 1]
    nll = F.cross_entropy(logits_BKV.float().reshape(-1, V), targets_BK.reshape(-1), reduction="none")
    logp_BT = torch.zeros(B, T, dtype=nll.dtype, device=nll.device).index_copy(1, keep + 1, -nll.view(B, -1))
    if not with_entropy:
        return logp_BT, None
    with torch.no_grad():
        z = logits_BKV.detach().float()
        entropy_BK = torch.logsumexp(z, -1) - (torch.softmax(z, -1) * z).sum(-1)
        entropy_BT = torch.zeros(B, T, dtype=z.dtype, device=z.device).index_copy(1, keep + 1, entropy_BK)
    return logp_BT, entropy_BT
