import type pg from 'pg';

export interface StepRow {
  stage: string;
  step: number;
  metrics: Record<string, number>;
}

export interface ReportData {
  runId: string;
  name: string;
  createdAt: string;
  steps: StepRow[];
  evaluations: {
    label: string;
    kind: string;
    model: string;
    split: string;
    metrics: Record<string, number>;
  }[];
  skills: { skill: string; uses: number }[];
  judgements: { total: number; failed: number };
}

/** Everything a run report shows, read from PostgreSQL (the run's record of itself). */
export async function loadReportData(pool: pg.Pool, runId: string): Promise<ReportData> {
  const run = await pool.query<{ name: string; created_at: Date }>(
    'SELECT name, created_at FROM runs WHERE id = $1',
    [runId],
  );
  if (run.rows.length === 0) throw new Error(`unknown run ${runId}: \`evalrl run list\` shows the runs`);
  const steps = await pool.query<StepRow>(
    'SELECT stage, step, metrics FROM step_metrics WHERE run_id = $1 ORDER BY stage, step',
    [runId],
  );
  const evaluations = await pool.query(
    'SELECT label, kind, model, split, metrics FROM evaluations WHERE run_id = $1 ORDER BY created_at',
    [runId],
  );
  const skills = await pool.query<{ skill: string; uses: number }>(
    `SELECT skill, count(*)::int AS uses
     FROM judgements j JOIN trajectories t ON t.id = j.trajectory_id, unnest(j.skills_used) AS skill
     WHERE t.run_id = $1 GROUP BY skill ORDER BY uses DESC, skill`,
    [runId],
  );
  const judgements = await pool.query<{ total: number; failed: number }>(
    `SELECT count(*)::int AS total, count(*) FILTER (WHERE j.failed)::int AS failed
     FROM judgements j JOIN trajectories t ON t.id = j.trajectory_id WHERE t.run_id = $1`,
    [runId],
  );
  return {
    runId,
    name: run.rows[0].name,
    createdAt: run.rows[0].created_at.toISOString(),
    steps: steps.rows,
    evaluations: evaluations.rows,
    skills: skills.rows,
    judgements: judgements.rows[0],
  };
}
