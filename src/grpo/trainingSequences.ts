import type { Turn } from '../env/trajectory';
import type { TrainSequence } from '../modelServer/schemas';

/**
 * A multi-turn episode becomes one training sequence per model call: the prompt tokens the server rendered
 * (mask 0) followed by the tokens it sampled (mask 1, with their sampler logprobs), all with the episode's
 * advantage. Token ids come from the sampler, so nothing is re-tokenised.
 */
export function trainingSequences(turns: Turn[], advantage: number): TrainSequence[] {
  return turns
    .filter((t) => t.promptTokenIds && t.tokenIds && t.logprobs && t.tokenIds.length > 0)
    .map((t) => ({
      token_ids: [...t.promptTokenIds!, ...t.tokenIds!],
      mask: [...t.promptTokenIds!.map(() => 0 as const), ...t.tokenIds!.map(() => 1 as const)],
      logprobs: [...t.promptTokenIds!.map(() => 0), ...t.logprobs!],
      advantage,
    }));
}
