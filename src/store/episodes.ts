import type { Trajectory, Turn } from '../env/trajectory';
import type { SampleRef, Split } from '../grpo/env';
import type { RewardComponents } from '../reward/deterministic';
import { inTransaction } from '../db/pool';
import { storableJson, type Db } from './db';

/** An episode's idempotent key: one episode per (run, stage, step, task, sample). */
export interface EpisodeKey {
  runId: string;
  stage: string;
  step: number;
  taskId: string;
  sample: number;
}

export interface StoredEpisode {
  id: number;
  trajectory: Trajectory;
  reward: RewardComponents;
}

const KEY_WHERE = 'run_id = $1 AND stage = $2 AND step = $3 AND task_id = $4 AND sample = $5';
const keyParams = (k: EpisodeKey) => [k.runId, k.stage, k.step, k.taskId, k.sample];

/** The episode stored under `key`, with its deterministic reward, if an attempt already finished it. */
export async function findEpisode(db: Db, key: EpisodeKey): Promise<StoredEpisode | null> {
  const { rows } = await db.query(
    `SELECT t.id, t.messages, t.turns, t.facts, t.wall_ms, r.components
     FROM trajectories t JOIN deterministic_rewards r ON r.trajectory_id = t.id
     WHERE t.run_id = $1 AND t.stage = $2 AND t.step = $3 AND t.task_id = $4 AND t.sample = $5`,
    keyParams(key),
  );
  return rows.length === 0 ? null : toEpisode(rows[0]);
}

/**
 * Stores an episode and its reward together, once. When another attempt stored this key first, its episode
 * and reward are returned instead (this attempt's are dropped): the reward always belongs to the stored
 * trajectory, whichever attempt finished first.
 */
export async function storeEpisode(
  db: Db,
  key: EpisodeKey,
  questionId: string | null,
  t: Trajectory,
  reward: RewardComponents,
): Promise<StoredEpisode> {
  const inserted = await inTransaction(db, async (client) => {
    const { rows } = await client.query<{ id: string }>(
      `INSERT INTO trajectories (run_id, stage, step, task_id, sample, question_id, messages, turns, facts, wall_ms)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
       ON CONFLICT (run_id, stage, step, task_id, sample) DO NOTHING RETURNING id`,
      [
        ...keyParams(key),
        questionId,
        storableJson(t.messages),
        storableJson(t.turns),
        storableJson(t.facts),
        Math.round(t.wallMs),
      ],
    );
    if (rows.length === 0) return null;
    await client.query(
      'INSERT INTO deterministic_rewards (trajectory_id, components, total) VALUES ($1, $2, $3)',
      [rows[0].id, storableJson(reward), reward.total],
    );
    return Number(rows[0].id);
  });
  if (inserted !== null) return { id: inserted, trajectory: t, reward };
  const stored = await findEpisode(db, key);
  if (!stored) throw new Error(`episode ${JSON.stringify(key)} vanished after a conflicting insert`);
  return stored;
}

export async function loadEpisode(
  db: Db,
  id: number,
): Promise<(StoredEpisode & { questionId: string | null }) | null> {
  const { rows } = await db.query(
    `SELECT t.id, t.question_id, t.messages, t.turns, t.facts, t.wall_ms, r.components
     FROM trajectories t JOIN deterministic_rewards r ON r.trajectory_id = t.id WHERE t.id = $1`,
    [id],
  );
  return rows.length === 0 ? null : { ...toEpisode(rows[0]), questionId: rows[0].question_id };
}

function toEpisode(row: Record<string, unknown>): StoredEpisode {
  return {
    id: Number(row.id),
    trajectory: {
      messages: row.messages,
      turns: row.turns,
      facts: row.facts,
      wallMs: row.wall_ms,
    } as Trajectory,
    reward: row.components as RewardComponents,
  };
}

/** The stage under which a run's reward-model candidates of a split are stored. */
export const candidateStage = (split: Split) => `candidates:${split}`;

/**
 * A run's labelled candidate episodes of a split, as reward-model tasks named by their place
 * ("question#sample") rather than their row id, so that two runs with the same seed draw the same tasks.
 */
export async function candidates(
  db: Db,
  runId: string,
  split: Split,
): Promise<{ task: string; correct: boolean }[]> {
  const { rows } = await db.query<{ task: string; correct: boolean }>(
    `SELECT t.task_id || '#' || t.sample AS task, l.correct FROM trajectories t JOIN teacher_labels l ON l.trajectory_id = t.id
     WHERE t.run_id = $1 AND t.stage = $2 ORDER BY t.task_id, t.sample`,
    [runId, candidateStage(split)],
  );
  return rows;
}

/** The stored candidate episode a reward-model task names, or null. */
export async function candidateId(db: Db, runId: string, split: Split, task: string): Promise<number | null> {
  const at = task.lastIndexOf('#');
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM trajectories WHERE ${KEY_WHERE}`, [
    runId,
    candidateStage(split),
    0,
    task.slice(0, at),
    Number(task.slice(at + 1)),
  ]);
  return rows.length === 0 ? null : Number(rows[0].id);
}

/** The model calls of a stored sample, with their token ids: what a train step is built from. */
export async function sampledTurns(db: Db, { kind, id }: SampleRef): Promise<Turn[] | null> {
  const table = kind === 'trajectory' ? 'trajectories' : 'judgements';
  const { rows } = await db.query<{ turns: Turn[] }>(`SELECT turns FROM ${table} WHERE id = $1`, [id]);
  return rows.length === 0 ? null : rows[0].turns;
}
