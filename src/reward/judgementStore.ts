import type pg from 'pg';
import type { Judgement } from './judge';

/** Stores a judgement once per (trajectory, judge key); a retried judge gets the stored one's id back. */
export async function storeJudgement(
  pool: pg.Pool,
  trajectoryId: number,
  judgeKey: string,
  judgeModel: string,
  j: Judgement,
) {
  const { rows } = await pool.query<{ id: string }>(
    `INSERT INTO judgements (trajectory_id, judge_key, judge_model, mode, score, failed, failure, verdict, evidence,
                             skills_used, resources_read, applied, messages, turns)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
     ON CONFLICT (trajectory_id, judge_key) DO UPDATE SET judge_key = EXCLUDED.judge_key
     RETURNING id`,
    [
      trajectoryId, judgeKey, judgeModel, j.mode, j.score, j.failed, j.failure, j.verdict && JSON.stringify(j.verdict),
      JSON.stringify(j.evidence), j.skillsUsed, j.resourcesRead, j.applied, JSON.stringify(j.messages), JSON.stringify(j.turns),
    ],
  ); // prettier-ignore
  return Number(rows[0].id);
}
