import type { Judgement } from '../reward/judge';
import type { Label } from '../reward/teacher';
import { storable, storableJson, type Db } from './db';

export interface StoredJudgement {
  id: number;
  score: number;
  failed: boolean;
  confidence: number;
  /** It loaded a skill, read a resource or ran a verifier: a failed judgement that still followed the procedure. */
  usedTools: boolean;
}

/** The judgement of a trajectory under a judge key (judge adapter, stage, sample), if one is stored. */
export async function findJudgement(
  db: Db,
  trajectoryId: number,
  judgeKey: string,
): Promise<StoredJudgement | null> {
  const { rows } = await db.query(
    `SELECT id, score, failed, verdict,
            cardinality(skills_used) + cardinality(resources_read) + jsonb_array_length(evidence) > 0 AS used_tools
     FROM judgements WHERE trajectory_id = $1 AND judge_key = $2`,
    [trajectoryId, judgeKey],
  );
  if (rows.length === 0) return null;
  const r = rows[0];
  return {
    id: Number(r.id),
    score: r.score,
    failed: r.failed,
    confidence: r.verdict?.confidence ?? 0,
    usedTools: r.used_tools,
  };
}

/** Stores a judgement once per (trajectory, judge key); when another attempt stored it first, that one wins. */
export async function storeJudgement(
  db: Db,
  trajectoryId: number,
  judgeKey: string,
  judgeModel: string,
  j: Judgement,
): Promise<StoredJudgement> {
  await db.query(
    `INSERT INTO judgements (trajectory_id, judge_key, judge_model, mode, score, failed, failure, verdict, evidence,
                             skills_used, resources_read, applied, messages, turns)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
     ON CONFLICT (trajectory_id, judge_key) DO NOTHING`,
    [
      trajectoryId, judgeKey, judgeModel, j.mode, j.score, j.failed, j.failure && storable(j.failure),
      j.verdict && storableJson(j.verdict), storableJson(j.evidence), j.skillsUsed.map(storable),
      j.resourcesRead.map(storable), j.applied.map(storable), storableJson(j.messages), storableJson(j.turns),
    ],
  ); // prettier-ignore
  return (await findJudgement(db, trajectoryId, judgeKey))!;
}

/** The teacher's label of a trajectory (cached: a trajectory is labelled once). */
export async function findLabel(db: Db, trajectoryId: number): Promise<Label | null> {
  const { rows } = await db.query<Label>(
    'SELECT correct, reason, source FROM teacher_labels WHERE trajectory_id = $1',
    [trajectoryId],
  );
  return rows[0] ?? null;
}

/** Stores a label once; returns the stored one (another attempt's, if it came first). */
export async function storeLabel(db: Db, trajectoryId: number, label: Label): Promise<Label> {
  await db.query(
    'INSERT INTO teacher_labels (trajectory_id, correct, reason, source) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING',
    [trajectoryId, label.correct, storable(label.reason), label.source],
  );
  return (await findLabel(db, trajectoryId))!;
}

/** How two runs' judges scored the policy episodes both runs sampled alike. */
export interface JudgeComparison {
  /** Policy episodes of the same step, task and sample whose sampled tokens are the same in both runs. */
  episodes: number;
  /** Of those, the ones the two runs' judges scored differently. */
  differing: number;
}

/**
 * Compares the judges of two runs on the episodes they share: a ladder's two policy stages start from the same
 * policy and seeds, so until their policies part they sample the same episodes, and only the judge differs.
 * Tool-call ids are drawn per run, so episodes are matched by their sampled tokens, not their messages.
 */
export async function compareJudges(db: Db, runA: string, runB: string): Promise<JudgeComparison> {
  const { rows } = await db.query<JudgeComparison>(
    `SELECT count(*)::int AS episodes, count(*) FILTER (WHERE ja.score <> jb.score)::int AS differing
     FROM trajectories a
     JOIN trajectories b ON b.run_id = $2
       AND (b.stage, b.step, b.task_id, b.sample) = (a.stage, a.step, a.task_id, a.sample)
       AND jsonb_path_query_array(b.turns, '$[*].tokenIds') = jsonb_path_query_array(a.turns, '$[*].tokenIds')
     JOIN judgements ja ON ja.trajectory_id = a.id AND starts_with(ja.judge_key, a.run_id || ':policy:')
     JOIN judgements jb ON jb.trajectory_id = b.id AND starts_with(jb.judge_key, b.run_id || ':policy:')
     WHERE a.run_id = $1 AND a.stage = 'policy'`,
    [runA, runB],
  );
  return rows[0];
}
