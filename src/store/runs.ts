import type { EvaluationResult } from '../contract';
import type { Split } from '../grpo/env';
import type { RunSpec } from '../runSpec';
import type { Db } from './db';

/** Records a run and its validated spec; returns the spec stored under its id (a resumed run's own). */
export async function insertRun(db: Db, runId: string, spec: RunSpec): Promise<RunSpec> {
  await db.query('INSERT INTO runs (id, name, spec) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING', [
    runId,
    spec.name,
    spec,
  ]);
  const { rows } = await db.query<{ spec: RunSpec }>('SELECT spec FROM runs WHERE id = $1', [runId]);
  return rows[0].spec;
}

/** The spec a run was registered with, or null for an unknown run. */
export async function storedSpec(db: Db, runId: string): Promise<RunSpec | null> {
  const { rows } = await db.query<{ spec: RunSpec }>('SELECT spec FROM runs WHERE id = $1', [runId]);
  return rows[0]?.spec ?? null;
}

/** Claims an adapter name for a run's stage; returns who holds it (this run, or the run that claimed it first). */
export async function claimAdapter(db: Db, adapter: string, runId: string, stage: string) {
  await db.query(
    'INSERT INTO run_adapters (adapter, run_id, stage) VALUES ($1, $2, $3) ON CONFLICT (adapter) DO NOTHING',
    [adapter, runId, stage],
  );
  const { rows } = await db.query<{ run_id: string; stage: string }>(
    'SELECT run_id, stage FROM run_adapters WHERE adapter = $1',
    [adapter],
  );
  return { runId: rows[0].run_id, stage: rows[0].stage };
}

export async function recordStepMetrics(db: Db, runId: string, stage: string, step: number, metrics: object) {
  await db.query(
    `INSERT INTO step_metrics (run_id, stage, step, metrics) VALUES ($1, $2, $3, $4)
     ON CONFLICT (run_id, stage, step) DO UPDATE SET metrics = EXCLUDED.metrics`,
    [runId, stage, step, metrics],
  );
}

/** The last step of a stage whose metrics were recorded (0 when none). */
export async function lastRecordedStep(db: Db, runId: string, stage: string): Promise<number> {
  const { rows } = await db.query<{ last: number | null }>(
    'SELECT max(step) AS last FROM step_metrics WHERE run_id = $1 AND stage = $2',
    [runId, stage],
  );
  return rows[0].last ?? 0;
}

export interface StepRow {
  stage: string;
  step: number;
  metrics: Record<string, number>;
}

export async function stepHistory(db: Db, runId: string): Promise<StepRow[]> {
  const { rows } = await db.query<StepRow>(
    'SELECT stage, step, metrics FROM step_metrics WHERE run_id = $1 ORDER BY created_at, stage, step',
    [runId],
  );
  return rows;
}

export async function recordEvaluation(db: Db, runId: string, split: Split, e: EvaluationResult) {
  await db.query(
    `INSERT INTO evaluations (run_id, label, kind, model, split, metrics) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (run_id, label) DO UPDATE SET metrics = EXCLUDED.metrics`,
    [runId, e.label, e.kind, e.model, split, e.metrics],
  );
}

/** Records a step's adapter version (where it lies, its hash): what evaluation, reports and samplers read. */
export async function recordAdapterVersion(
  db: Db,
  v: { adapter: string; step: number; runId: string; stage: string; checkpoint: string; sha256: string },
) {
  await db.query(
    `INSERT INTO published_adapters (adapter, step, run_id, stage, checkpoint, sha256)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (adapter, step) DO NOTHING`,
    [v.adapter, v.step, v.runId, v.stage, v.checkpoint, v.sha256],
  );
}

/** Where a recorded version's PEFT folder lies (what a restarted sampler loads again), if it was recorded. */
export async function adapterCheckpoint(db: Db, adapter: string, step: number): Promise<string | undefined> {
  const { rows } = await db.query<{ checkpoint: string }>(
    'SELECT checkpoint FROM published_adapters WHERE adapter = $1 AND step = $2',
    [adapter, step],
  );
  return rows[0]?.checkpoint;
}

export async function recordStackCheck(db: Db, workflowId: string, message: string): Promise<string> {
  await db.query(
    'INSERT INTO stack_checks (workflow_id, message) VALUES ($1, $2) ON CONFLICT (workflow_id) DO NOTHING',
    [workflowId, message],
  );
  const { rows } = await db.query<{ message: string }>(
    'SELECT message FROM stack_checks WHERE workflow_id = $1',
    [workflowId],
  );
  return rows[0].message;
}

export interface ReportData {
  runId: string;
  name: string;
  createdAt: string;
  steps: StepRow[];
  evaluations: (EvaluationResult & { split: string })[];
  skills: { skill: string; uses: number }[];
  judgements: { total: number; failed: number };
}

/** Everything a run report shows, read from the run's record of itself. */
export async function reportData(db: Db, runId: string): Promise<ReportData | null> {
  const run = await db.query<{ name: string; created_at: Date }>(
    'SELECT name, created_at FROM runs WHERE id = $1',
    [runId],
  );
  if (run.rows.length === 0) return null;
  const evaluations = await db.query(
    'SELECT label, kind, model, split, metrics FROM evaluations WHERE run_id = $1 ORDER BY created_at',
    [runId],
  );
  const skills = await db.query<{ skill: string; uses: number }>(
    `SELECT skill, count(*)::int AS uses
     FROM judgements j JOIN trajectories t ON t.id = j.trajectory_id, unnest(j.skills_used) AS skill
     WHERE t.run_id = $1 GROUP BY skill ORDER BY uses DESC, skill`,
    [runId],
  );
  const judgements = await db.query<{ total: number; failed: number }>(
    `SELECT count(*)::int AS total, count(*) FILTER (WHERE j.failed)::int AS failed
     FROM judgements j JOIN trajectories t ON t.id = j.trajectory_id WHERE t.run_id = $1`,
    [runId],
  );
  return {
    runId,
    name: run.rows[0].name,
    createdAt: run.rows[0].created_at.toISOString(),
    steps: await stepHistory(db, runId),
    evaluations: evaluations.rows,
    skills: skills.rows,
    judgements: judgements.rows[0],
  };
}
