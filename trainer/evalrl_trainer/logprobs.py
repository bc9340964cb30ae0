"""Per-token logprobs and entropy of a causal LM, computed a micro-batch at a time."""
import torch
import torch.nn.functional as F


def token_logprobs(model, input_ids_BT: torch.Tensor, attention_BT: torch.Tensor, with_entropy: bool = False):
    """logp_BT[b, t] = log p(input_ids[b, t] | input_ids[b, :t]); position 0 has no prediction and is 0.

    cross_entropy is the fused log-softmax + gather; logits are upcast to fp32 inside it only, a micro-batch
    at a time (vocab × tokens is the largest tensor of the step). Entropy is a metric: no gradient.
    """
    # No KV cache in training; an all-ones mask is dropped so attention can take the fused causal kernel.
    mask = None if bool(attention_BT.all()) else attention_BT
    logits_BTV = model(input_ids=input_ids_BT, attention_mask=mask, use_cache=False).logits[:, :-1]
    B, T1, V = logits_BTV.shape
    nll = F.cross_entropy(logits_BTV.float().reshape(-1, V), input_ids_BT[:, 1:].reshape(-1), reduction="none")
    logp_BT = F.pad(-nll.view(B, T1), (1, 0))
    if not with_entropy:
        return logp_BT, None
    with torch.no_grad():
        z = logits_BTV.detach().float()
        entropy = torch.logsumexp(z, -1) - (torch.softmax(z, -1) * z).sum(-1)
    return logp_BT, F.pad(entropy, (1, 0))
