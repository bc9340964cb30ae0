import type { Turn } from '../env/trajectory';
import type { TrainSequence } from '../modelServer/schemas';

const extends_ = (longer: number[], prefix: number[]) =>
  longer.length >= prefix.length && prefix.every((t, i) => longer[i] === t);

/**
 * A multi-turn episode becomes training sequences of token ids the sampler gave (nothing is re-tokenised):
 * prompt tokens (mask 0), then the sampled tokens (mask 1, with their sampler logprobs), all with the
 * episode's advantage. When a turn's prompt extends the previous turn's prompt and reply — the chat template
 * rendered the reply back as it was sampled — the turns are one sequence, so the shared prompt is trained
 * through once instead of once per turn. A turn without its sampled tokens is an error, not a silent gap.
 */
export function trainingSequences(turns: Turn[], advantage: number): TrainSequence[] {
  const sequences: TrainSequence[] = [];
  let open: TrainSequence | null = null;
  for (const [i, t] of turns.entries()) {
    if (!t.promptTokenIds || !t.tokenIds || !t.logprobs || t.logprobs.length !== t.tokenIds.length)
      throw new Error(
        `turn ${i + 1} came back without its token ids and logprobs (one each per sampled token): the sampler ` +
          'ignored return_token_ids or logprobs (vLLM before 0.10.2 does so silently); `evalrl preflight` checks a sampler',
      );
    if (t.tokenIds.length === 0) continue;
    const prompt = t.promptTokenIds;
    if (open && extends_(prompt, open.token_ids)) {
      const added = prompt.slice(open.token_ids.length);
      open.token_ids.push(...added, ...t.tokenIds);
      open.mask.push(...added.map(() => 0 as const), ...t.tokenIds.map(() => 1 as const));
      open.logprobs.push(...added.map(() => 0), ...t.logprobs);
      continue;
    }
    open = {
      token_ids: [...prompt, ...t.tokenIds],
      mask: [...prompt.map(() => 0 as const), ...t.tokenIds.map(() => 1 as const)],
      logprobs: [...prompt.map(() => 0), ...t.logprobs],
      advantage,
    };
    sequences.push(open);
  }
  return sequences;
}
