import type pg from 'pg';
import type { RewardComponents } from '../reward/deterministic';
import type { Trajectory } from './trajectory';

/** A trajectory's idempotent key: one episode per (run, stage, step, task, sample). */
export interface TrajectoryKey {
  runId: string;
  stage: string;
  step: number;
  taskId: string;
  sample: number;
}

/**
 * Stores a trajectory once. A retried rollout that arrives with the same key gets the id of the stored one
 * (its own episode is dropped), so no rollout is ever stored twice.
 */
export async function storeTrajectory(
  pool: pg.Pool,
  key: TrajectoryKey,
  questionId: string | null,
  t: Trajectory,
): Promise<{ id: number; inserted: boolean }> {
  const inserted = await pool.query<{ id: string }>(
    `INSERT INTO trajectories (run_id, stage, step, task_id, sample, question_id, messages, turns, facts, wall_ms)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
     ON CONFLICT (run_id, stage, step, task_id, sample) DO NOTHING RETURNING id`,
    [
      key.runId,
      key.stage,
      key.step,
      key.taskId,
      key.sample,
      questionId,
      JSON.stringify(t.messages),
      JSON.stringify(t.turns),
      t.facts,
      Math.round(t.wallMs),
    ],
  );
  if (inserted.rows.length > 0) return { id: Number(inserted.rows[0].id), inserted: true };
  const existing = await pool.query<{ id: string }>(
    'SELECT id FROM trajectories WHERE run_id = $1 AND stage = $2 AND step = $3 AND task_id = $4 AND sample = $5',
    [key.runId, key.stage, key.step, key.taskId, key.sample],
  );
  return { id: Number(existing.rows[0].id), inserted: false };
}

export async function loadTrajectory(pool: pg.Pool, id: number): Promise<Trajectory> {
  const { rows } = await pool.query(
    'SELECT messages, turns, facts, wall_ms FROM trajectories WHERE id = $1',
    [id],
  );
  if (rows.length === 0) throw new Error(`trajectory ${id} not found`);
  return { messages: rows[0].messages, turns: rows[0].turns, facts: rows[0].facts, wallMs: rows[0].wall_ms };
}

export async function storeDeterministicReward(pool: pg.Pool, trajectoryId: number, r: RewardComponents) {
  await pool.query(
    `INSERT INTO deterministic_rewards (trajectory_id, components, total) VALUES ($1, $2, $3)
     ON CONFLICT (trajectory_id) DO UPDATE SET components = EXCLUDED.components, total = EXCLUDED.total`,
    [trajectoryId, r, r.total],
  );
}
