import type { RunStatus, StageName, StageStatus } from '../contract';
import { bestPolicyEvaluation, STAGE_NAMES } from '../contract';
import { stageAdapter, stageSteps } from '../grpo/stage';
import { hyperparametersSchema } from '../hyperparameters';
import type { RunSpec } from '../runSpec';
import type { ReportData } from '../store/runs';

/**
 * A run's status from what it stored (its spec, step metrics and evaluations), for when no worker answers
 * the run's query: stage, step, latest metrics and checkpoints are known; the live phase and ETA are not.
 */
export function storedRunStatus(data: ReportData, spec: RunSpec, startedAt: number): RunStatus {
  const stages: Partial<Record<StageName, StageStatus>> = {};
  const checkpoints: Record<string, number> = {};
  for (const row of data.steps) {
    const stage = row.stage as StageName;
    if (!STAGE_NAMES.includes(stage) || (stages[stage] && stages[stage].step > row.step)) continue;
    const totalSteps = stageSteps(spec, stage);
    stages[stage] = {
      stage,
      step: row.step,
      totalSteps,
      phase: row.step >= totalSteps ? 'done' : 'unknown',
      paused: false,
      hyperparameters: hyperparametersSchema.parse(spec.stages[stage].hyperparameters),
      latest: row.metrics,
      evaluations: [],
      secondsPerStep: null,
    };
    checkpoints[stageAdapter(spec, stage)] = row.step;
  }
  const current = STAGE_NAMES.filter((s) => stages[s]).at(-1);
  return {
    runId: data.runId,
    name: data.name,
    state: 'running',
    phase: current ?? 'prepare',
    stageWorkflowId: null,
    stages,
    evaluations: data.evaluations,
    best: bestPolicyEvaluation(data.evaluations),
    checkpoints,
    blocked: null,
    startedAt,
    etaSeconds: null,
  };
}
