import { createHash } from 'node:crypto';

/**
 * The tasks of one step, chosen deterministically from (seed, stage, step): a replayed step after a crash
 * picks the same tasks. Tasks in `skip` (recently found to have zero reward variance) are passed over;
 * `offset` continues the same order for top-ups.
 */
export function sampleTasks(
  taskIds: string[],
  seed: number,
  stage: string,
  step: number,
  count: number,
  skip = new Set<string>(),
  offset = 0,
): string[] {
  const key = (id: string) =>
    createHash('sha256').update(`${seed}\u0000${stage}\u0000${step}\u0000${id}`).digest('hex');
  const order = taskIds
    .filter((id) => !skip.has(id))
    .sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  return order.slice(offset, offset + count);
}
