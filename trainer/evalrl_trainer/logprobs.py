"""Per-token logprobs and entropy of a causal LM, in bounded memory.

Memory does not depend on what was sampled: attention runs without a T × T mask (rows are right-padded, which
a causal model never attends to), and the output layer runs only at the positions whose next token is used, in
chunks that are recomputed in the backward pass instead of kept, so vocab × tokens logits never exist at once.
"""
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

HEAD_CHUNK = 512  # positions per output-layer chunk: 512 × 49,152 fp32 logits ≈ 100 MB (SmolLM2)


def causal_lm(model):
    """The transformers causal LM inside a PEFT wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def token_logprobs(
    model,
    input_ids_BT: torch.Tensor,  # (B, T) right-padded
    needed_BT: torch.Tensor | None = None,  # (B, T) 1 where the token's logprob is used; None: every token
    with_entropy: bool = False,
):
    """logp_BT[b, t] = log p(input_ids[b, t] | input_ids[b, :t]) where needed (0 elsewhere and at t = 0).

    Entropy (a metric, no gradient) is that of the next-token distribution at the same places.
    """
    B, T = input_ids_BT.shape
    lm = causal_lm(model)
    hidden_BTH = lm.get_decoder()(input_ids=input_ids_BT, use_cache=False).last_hidden_state
    needed = torch.ones_like(input_ids_BT, dtype=torch.bool) if needed_BT is None else needed_BT.bool()
    needed[:, 0] = False  # nothing predicts the first token
    rows_N, cols_N = torch.nonzero(needed, as_tuple=True)  # token (b, t) is predicted at (b, t - 1)
    hidden_NH = hidden_BTH[rows_N, cols_N - 1]
    targets_N = input_ids_BT[rows_N, cols_N]
    head = lm.get_output_embeddings()
    logp, entropy = [], []
    for start in range(0, len(targets_N), HEAD_CHUNK):
        chunk = slice(start, start + HEAD_CHUNK)
        lp, ent = checkpoint(_chunk_logprobs, head, hidden_NH[chunk], targets_N[chunk], use_reentrant=False)
        logp.append(lp)
        entropy.append(ent)
    logp_BT = torch.zeros(B, T, dtype=torch.float32, device=input_ids_BT.device)
    logp_BT = logp_BT.index_put((rows_N, cols_N), torch.cat(logp) if logp else logp_BT.new_zeros(0))
    if not with_entropy:
        return logp_BT, None
    entropy_BT = torch.zeros(B, T, dtype=torch.float32, device=input_ids_BT.device)
    entropy_BT[rows_N, cols_N] = torch.cat(entropy) if entropy else entropy_BT.new_zeros(0)
    return logp_BT, entropy_BT


def _chunk_logprobs(head, hidden_NH: torch.Tensor, targets_N: torch.Tensor):
    """One chunk of the output layer: the target's logprob (fp32, fused log-softmax + gather) and the entropy."""
    logits_NV = head(hidden_NH).float()
    logp_N = -F.cross_entropy(logits_NV, targets_N, reduction="none")
    with torch.no_grad():
        entropy_N = torch.logsumexp(logits_NV, -1) - (torch.softmax(logits_NV, -1) * logits_NV).sum(-1)
    return logp_N, entropy_N
