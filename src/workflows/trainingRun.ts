import {
  condition,
  defineQuery,
  defineSignal,
  executeChild,
  getExternalWorkflowHandle,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import { agentTemplate, judgeTemplate, stageInput, type StageName } from '../grpo/stage';
import { rootMessage } from '../rootMessage';
import type { RunSpec } from '../runSpec';
import { RUN_ID, STAGE, STATUS, STEP } from '../searchAttributes';
import { TASK_QUEUES } from '../taskQueues';
import { grpoStage } from './grpoStage';
import {
  cancelSignal,
  hyperparametersSignal,
  pauseSignal,
  resumeSignal,
  setHyperparametersUpdate,
  stageProgressSignal,
  validateHyperparameters,
  type EvaluationResult,
  type Hyperparameters,
  type StageStatus,
} from './messages';
import { activityProxies } from './proxies';

export interface TrainingRunInput {
  runId: string;
  spec: RunSpec;
}

export type RunState = 'running' | 'paused' | 'blocked' | 'cancelled' | 'done';
export type RunPhase = 'prepare' | 'baseline' | StageName | 'done';

export interface RunStatus {
  runId: string;
  name: string;
  state: RunState;
  phase: RunPhase;
  /** The workflow of the stage in progress (query it for the live phase of its step). */
  stageWorkflowId: string | null;
  stages: Partial<Record<StageName, StageStatus>>;
  evaluations: EvaluationResult[];
  /** The policy evaluation with the highest success rate. */
  best: EvaluationResult | null;
  /** Latest checkpointed step of each adapter. */
  checkpoints: Record<string, number>;
  blocked: { phase: RunPhase; error: string; retries: number } | null;
  startedAt: number;
  etaSeconds: number | null;
}

export const runStatusQuery = defineQuery<RunStatus>('status');
/** Retries the blocked phase, optionally with new hyperparameters for its stage. */
export const retrySignal = defineSignal<[{ hyperparameters?: Hyperparameters }?]>('retry');

/**
 * A training run: prepare the data (register the run, the reward model's labelled candidates, baseline
 * evaluations) → reward-model stage → policy stage judged by the reward-model adapter stage 1 trained.
 * A phase that fails after its retries does not fail the run: the run waits in `blocked` until `retry`
 * (optionally with new settings) or `cancel`.
 */
export async function trainingRun({ runId, spec }: TrainingRunInput): Promise<RunStatus> {
  const { cpu, rollout } = activityProxies(spec.activities);
  const status: RunStatus = {
    runId,
    name: spec.name,
    state: 'running',
    phase: 'prepare',
    stageWorkflowId: null,
    stages: {},
    evaluations: [],
    best: null,
    checkpoints: {},
    blocked: null,
    startedAt: Date.now(),
    etaSeconds: null,
  };
  const overrides: Partial<Record<StageName, Hyperparameters>> = {};
  let paused = false;
  let cancelled = false;
  let retryAsked = false;
  const child = () => (status.stageWorkflowId ? getExternalWorkflowHandle(status.stageWorkflowId) : null);
  const stageOf = (phase: RunPhase): StageName | null =>
    phase === 'rewardModel' || phase === 'policy' ? phase : null;

  setHandler(runStatusQuery, () => ({ ...status, etaSeconds: eta(spec, status) }));
  setHandler(pauseSignal, async () => {
    paused = true;
    publish();
    await child()?.signal(pauseSignal);
  });
  setHandler(resumeSignal, async () => {
    paused = false;
    publish();
    await child()?.signal(resumeSignal);
  });
  setHandler(cancelSignal, async () => {
    cancelled = true;
    await child()?.signal(cancelSignal);
  });
  setHandler(
    setHyperparametersUpdate,
    async (h) => {
      // Applies to the stage in progress, or else to the next one.
      const stage = stageOf(status.phase) ?? (status.stages.rewardModel ? 'policy' : 'rewardModel');
      overrides[stage] = { ...overrides[stage], ...h };
      if (stageOf(status.phase)) await child()?.signal(hyperparametersSignal, h);
      return { ...stageInput(spec, runId, stage, '').hyperparameters, ...overrides[stage] };
    },
    { validator: validateHyperparameters },
  );
  setHandler(retrySignal, (options) => {
    const stage = status.blocked && stageOf(status.blocked.phase);
    if (stage && options?.hyperparameters) {
      validateHyperparameters(options.hyperparameters);
      overrides[stage] = { ...overrides[stage], ...options.hyperparameters };
    }
    retryAsked = true;
  });
  setHandler(stageProgressSignal, (s) => {
    status.stages[s.stage as StageName] = s;
    status.checkpoints[spec.models[s.stage as StageName].adapter] = s.step;
    status.evaluations = mergeEvaluations(status.evaluations, s.evaluations);
    status.best = bestPolicy(status.evaluations);
    publish();
  });

  function publish() {
    const stage = stageOf(status.phase);
    upsertSearchAttributes([
      { key: RUN_ID, value: runId },
      { key: STAGE, value: status.phase },
      { key: STEP, value: stage ? (status.stages[stage]?.step ?? 0) : 0 },
      { key: STATUS, value: status.state === 'running' && paused ? 'paused' : status.state },
    ]);
  }

  /** Runs a phase; when it fails after its retries, the run is `blocked` until retry or cancel. */
  async function guarded(phase: RunPhase, work: () => Promise<unknown>): Promise<boolean> {
    status.phase = phase;
    publish();
    for (let retries = 0; ; retries++) {
      await condition(() => !paused || cancelled);
      if (cancelled) return false;
      try {
        await work();
        return !cancelled;
      } catch (err) {
        if (cancelled) return false;
        status.state = 'blocked';
        status.blocked = { phase, error: rootMessage(err), retries };
        status.stageWorkflowId = null;
        publish();
        retryAsked = false;
        await condition(() => retryAsked || cancelled);
        status.state = 'running';
        status.blocked = null;
        publish();
      }
    }
  }

  async function evaluate(label: string, kind: 'policy' | 'rewardModel', model: string) {
    const result = await rollout.evaluate({
      runId,
      label,
      kind,
      model,
      split: spec.evaluation.split,
      count: spec.evaluation.questions,
      seed: spec.seed,
      agent: agentTemplate(spec),
      judge: judgeTemplate(spec),
      weights: spec.rewardWeights,
    });
    status.evaluations = mergeEvaluations(status.evaluations, [result]);
    status.best = bestPolicy(status.evaluations);
  }

  async function runStage(stage: StageName, judgeModel: string) {
    const startStep = await cpu.nextStep({ runId, stage });
    const input = stageInput(spec, runId, stage, judgeModel);
    if (startStep > input.steps) return; // trained before a retry of a later phase
    status.stageWorkflowId = `${runId}/${stage}`;
    const result = await executeChild(grpoStage, {
      workflowId: status.stageWorkflowId,
      taskQueue: TASK_QUEUES.workflows,
      args: [
        {
          ...input,
          startStep,
          hyperparameters: { ...input.hyperparameters, ...overrides[stage] },
          startPaused: paused,
        },
      ],
    });
    status.stages[stage] = result;
    status.stageWorkflowId = null;
  }

  const rm = spec.stages.rewardModel.enabled;
  const data = spec.rewardModelData;
  const candidates = (split: 'train' | 'test', questions: number) =>
    rollout.prepareCandidates({
      runId,
      seed: spec.seed,
      split,
      questions,
      episodesPerQuestion: data.episodesPerQuestion,
      agent: agentTemplate(spec),
      weights: spec.rewardWeights,
    });
  // A bad spec, a taken adapter name or missing questions fail the run before anything starts.
  await cpu.registerRun({ runId, spec });
  const ok =
    (await guarded('prepare', async () => {
      if (rm)
        await Promise.all([candidates('train', data.trainQuestions), candidates('test', data.testQuestions)]);
    })) &&
    (await guarded('baseline', async () => {
      await evaluate('policy:base', 'policy', 'base');
      if (rm) await evaluate('rewardModel:base', 'rewardModel', 'base');
    })) &&
    (!rm || (await guarded('rewardModel', () => runStage('rewardModel', 'base')))) &&
    (!spec.stages.policy.enabled ||
      (await guarded('policy', () => runStage('policy', rm ? spec.models.rewardModel.adapter : 'base'))));
  status.state = ok ? 'done' : 'cancelled';
  status.phase = 'done';
  publish();
  return status;
}

function mergeEvaluations(all: EvaluationResult[], more: EvaluationResult[]) {
  const byLabel = new Map(all.map((e) => [e.label, e]));
  for (const e of more) byLabel.set(e.label, e);
  return [...byLabel.values()];
}

function bestPolicy(evaluations: EvaluationResult[]): EvaluationResult | null {
  const policies = evaluations.filter((e) => e.kind === 'policy');
  return policies.reduce<EvaluationResult | null>(
    (best, e) => (!best || e.metrics.successRate > best.metrics.successRate ? e : best),
    null,
  );
}

/** Remaining steps of this and later stages at the pace of the latest stage. */
function eta(spec: RunSpec, s: RunStatus): number | null {
  const order: StageName[] = ['rewardModel', 'policy'];
  const pace = [...order]
    .reverse()
    .map((n) => s.stages[n]?.secondsPerStep)
    .find((x) => x != null);
  if (pace == null || s.state === 'done' || s.state === 'cancelled') return null;
  const remaining = order
    .filter((n) => spec.stages[n].enabled)
    .reduce((sum, n) => sum + spec.stages[n].steps - (s.stages[n]?.step ?? 0), 0);
  return remaining * pace;
}
