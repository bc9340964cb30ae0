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

export interface TaskDraw {
  /** Continues the same order, for top-ups. */
  offset?: number;
  /** A task's class (e.g. its label): each step draws the classes in turn, so that none dominates a step. */
  stratum?: (taskId: string) => string;
}

/**
 * The tasks of one GRPO step, chosen deterministically from (seed, stage, step): a replayed step after a
 * crash picks the same tasks.
 */
export function sampleTasks(
  taskIds: string[],
  seed: number,
  stage: string,
  step: number,
  count: number,
  { offset = 0, stratum }: TaskDraw = {},
): string[] {
  const order = seededOrder(taskIds, seed, stage, step);
  return (stratum ? interleaveBy(order, stratum) : order).slice(offset, offset + count);
}

/**
 * The held-out tasks an evaluation uses: the same for every model evaluated with this seed and count, each
 * stratum (question kind, label) in turn, so that a small evaluation is not one kind of task by chance.
 */
export function evaluationTasks(
  taskIds: string[],
  input: { seed: number; count: number },
  stratum?: (taskId: string) => string,
): string[] {
  return sampleTasks(taskIds, input.seed, 'eval', 0, input.count, { stratum });
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
