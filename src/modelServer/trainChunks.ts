import { createHash } from 'node:crypto';
import type { TrainSequence, TrainStepRequest } from './schemas';

/**
 * A step's sequences in order, split into chunks whose JSON stays within `budgetBytes` (numbers only, so a
 * character is a byte). A sequence larger than the budget goes alone, for the server to take or refuse.
 */
export function chunkSequences(sequences: TrainSequence[], budgetBytes: number): TrainSequence[][] {
  const chunks: TrainSequence[][] = [];
  let bytes = Infinity;
  for (const s of sequences) {
    const size = JSON.stringify(s).length + 1; // and its comma
    if (bytes + size > budgetBytes) {
      chunks.push([]);
      bytes = 1; // the brackets, less the last sequence's comma
    }
    chunks[chunks.length - 1].push(s);
    bytes += size;
  }
  return chunks;
}

/** The request without its sequences: what a staged step is asked for with (JSON leaves `undefined` out). */
export const stepSettings = (request: TrainStepRequest) => ({ ...request, sequences: undefined });

/** SHA-256 of the whole request, every sequence included: the key the server stages its chunks under. */
export function requestDigest(request: TrainStepRequest): string {
  const hash = createHash('sha256').update(JSON.stringify(stepSettings(request)));
  for (const s of request.sequences) hash.update(JSON.stringify(s));
  return hash.digest('hex');
}
