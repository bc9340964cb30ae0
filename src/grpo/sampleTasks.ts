import { createHash } from 'node:crypto';

/** A seeded order of task ids: the same seed, stage and round always give the same order. */
function seededOrder(taskIds: string[], seed: number, stage: string, round: number): string[] {
  const key = (id: string) =>
    createHash('sha256').update(`${seed}\u0000${stage}\u0000${round}\u0000${id}`).digest('hex');
  const keys = new Map(taskIds.map((id) => [id, key(id)]));
  return [...taskIds].sort((a, b) =>
    keys.get(a)! < keys.get(b)! ? -1 : keys.get(a)! > keys.get(b)! ? 1 : 0,
  );
}

/**
 * The tasks of one GRPO step, chosen deterministically from (seed, stage, step): a replayed step after a
 * crash picks the same tasks. Tasks in `skip` (recently found to have zero reward variance) are passed over;
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
  return seededOrder(
    taskIds.filter((id) => !skip.has(id)),
    seed,
    stage,
    step,
  ).slice(offset, offset + count);
}

/** The held-out tasks an evaluation uses: the same for every model evaluated with this seed and count. */
export function evaluationTasks(taskIds: string[], input: { seed: number; count: number }): string[] {
  return sampleTasks(taskIds, input.seed, 'eval', 0, input.count);
}

/**
 * The tasks of one supervised step: epochs over all tasks, each epoch in its own seeded order, `count` per
 * step, so every demonstration is seen once per epoch.
 */
export function epochBatch(
  taskIds: string[],
  seed: number,
  stage: string,
  step: number,
  count: number,
): string[] {
  if (taskIds.length === 0) return [];
  const batch: string[] = [];
  for (let position = (step - 1) * count; batch.length < Math.min(count, taskIds.length); position++) {
    const epoch = Math.floor(position / taskIds.length);
    batch.push(seededOrder(taskIds, seed, stage, epoch)[position % taskIds.length]);
  }
  return batch;
}

/**
 * The items of each kind in turn (kinds in order of first appearance, each kind's items in their order): a
 * stratified order, so that the first N items cover every kind instead of mirroring the most common one.
 */
export function interleaveBy<T>(items: T[], kind: (item: T) => string): T[] {
  const byKind = new Map<string, T[]>();
  for (const item of items) byKind.set(kind(item), [...(byKind.get(kind(item)) ?? []), item]);
  const queues = [...byKind.values()];
  const out: T[] = [];
  for (let i = 0; out.length < items.length; i++) for (const q of queues) if (i < q.length) out.push(q[i]);
  return out;
}
