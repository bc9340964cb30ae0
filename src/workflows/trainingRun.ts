import {
  condition,
  executeChild,
  getExternalWorkflowHandle,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import {
  bestPolicyEvaluation,
  cancelSignal,
  hyperparametersSignal,
  pauseSignal,
  resumeSignal,
  retryUpdate,
  RUN_ID,
  runStatusQuery,
  setHyperparametersUpdate,
  STAGE,
  STAGE_NAMES,
  stageProgressSignal,
  STATUS,
  STEP,
  TASK_QUEUES,
  type EvaluationResult,
  type RunPhase,
  type RunStatus,
  type StageName,
  type TrainingRunInput,
} from '../contract';
import { agentTemplate, stageAdapter, stageInput, stageSteps, untrainedJudge } from '../grpo/stage';
import { parseHyperparameterChange, type HyperparameterChange } from '../hyperparameters';
import { rootMessage } from '../rootMessage';
import type { RunSpec } from '../runSpec';
import { grpoStage } from './grpoStage';
import { activityProxies } from './proxies';

const isStage = (phase: RunPhase): phase is StageName => (STAGE_NAMES as readonly string[]).includes(phase);

/**
 * A training run: the policy's warm start → the reward model's labelled data → the judge's warm start →
 * baseline evaluations → the reward model's GRPO stage → the policy's GRPO stage, judged by the reward model
 * it just trained. Each part is optional in the spec. A phase that fails after its retries does not fail the
 * run: the run waits in `blocked` until `retry` (optionally with new hyperparameters) or `cancel`.
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
  const overrides: Partial<Record<StageName, HyperparameterChange>> = {};
  let paused = false;
  let cancelled = false;
  let retryAsked = false;
  const child = () => (status.stageWorkflowId ? getExternalWorkflowHandle(status.stageWorkflowId) : null);
  const enabled = STAGE_NAMES.filter((s) => spec.stages[s].enabled);

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
      const stage = isStage(status.phase)
        ? status.phase
        : (enabled.find((s) => !status.stages[s]) ?? 'policy');
      overrides[stage] = { ...overrides[stage], ...h };
      if (isStage(status.phase)) await child()?.signal(hyperparametersSignal, h);
      return { ...spec.stages[stage].hyperparameters, ...overrides[stage] };
    },
    { validator: parseHyperparameterChange },
  );
  setHandler(
    retryUpdate,
    (options) => {
      const phase = status.blocked!.phase;
      if (options?.hyperparameters && isStage(phase))
        overrides[phase] = { ...overrides[phase], ...options.hyperparameters };
      retryAsked = true;
      return { phase };
    },
    {
      // Refused to the caller, never accepted into history: a bad retry cannot wedge the run.
      validator: (options) => {
        if (status.state !== 'blocked')
          throw new Error(`retry: run ${runId} is ${status.state}, not blocked`);
        if (options?.hyperparameters) parseHyperparameterChange(options.hyperparameters);
      },
    },
  );
  setHandler(stageProgressSignal, (s) => {
    status.stages[s.stage] = s;
    status.checkpoints[stageAdapter(spec, s.stage)] = s.step;
    mergeEvaluations(s.evaluations);
    publish();
  });

  function publish() {
    upsertSearchAttributes([
      { key: RUN_ID, value: runId },
      { key: STAGE, value: status.phase },
      { key: STEP, value: isStage(status.phase) ? (status.stages[status.phase]?.step ?? 0) : 0 },
      { key: STATUS, value: status.state === 'running' && paused ? 'paused' : status.state },
    ]);
  }

  function mergeEvaluations(more: EvaluationResult[]) {
    const byLabel = new Map(status.evaluations.map((e) => [e.label, e]));
    for (const e of more) byLabel.set(e.label, e);
    status.evaluations = [...byLabel.values()];
    status.best = bestPolicyEvaluation(status.evaluations);
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

  async function evaluate(label: string, kind: EvaluationResult['kind'], model: string) {
    const env = stageInput(spec, runId, kind === 'policy' ? 'policy' : 'rewardModel').env;
    mergeEvaluations([
      await rollout.evaluate({
        runId,
        label,
        kind,
        model,
        env,
        split: spec.evaluation.split,
        count: kind === 'policy' ? spec.evaluation.questions : spec.evaluation.rewardModelEpisodes,
        seed: spec.seed,
      }),
    ]);
  }

  async function runStage(stage: StageName) {
    const startStep = await cpu.nextStep({ runId, stage });
    const input = stageInput(spec, runId, stage);
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
    mergeEvaluations(result.evaluations);
    status.stageWorkflowId = null;
  }

  const needsCandidates = spec.stages.rewardModel.enabled || spec.stages.judgeWarmStart.enabled;
  const data = spec.rewardModelData;
  const candidateModels = [
    'base',
    ...(spec.stages.policyWarmStart.enabled ? [stageAdapter(spec, 'policyWarmStart')] : []),
  ];
  const candidates = (split: 'train' | 'test', questions: number) =>
    rollout.prepareCandidates({
      runId,
      seed: spec.seed,
      split,
      questions,
      episodesPerQuestion: data.episodesPerQuestion,
      models: candidateModels,
      scripted: data.scripted,
      corrupt: data.corrupt,
      balance: data.balance,
      agent: agentTemplate(spec),
      weights: spec.rewardWeights,
    });
  const stage = (name: StageName) => async () =>
    !spec.stages[name].enabled || guarded(name, () => runStage(name));

  // A bad spec, a taken adapter name or missing questions fail the run before anything starts.
  await cpu.registerRun({ runId, spec });
  const ok =
    (await stage('policyWarmStart')()) &&
    (!needsCandidates ||
      (await guarded('prepare', () =>
        Promise.all([candidates('train', data.trainQuestions), candidates('test', data.testQuestions)]),
      ))) &&
    (await stage('judgeWarmStart')()) &&
    (await guarded('baseline', async () => {
      if (spec.evaluation.baseline) await evaluate('policy:base', 'policy', 'base');
      if (spec.stages.rewardModel.enabled && !spec.stages.judgeWarmStart.enabled)
        await evaluate('rewardModel:untrained', 'rewardModel', untrainedJudge(spec));
    })) &&
    (await stage('rewardModel')()) &&
    (await stage('policy')());
  status.state = ok ? 'done' : 'cancelled';
  status.phase = 'done';
  publish();
  return status;
}

/** Remaining steps of this and later stages at the pace of the latest stage. */
function eta(spec: RunSpec, s: RunStatus): number | null {
  const pace = [...STAGE_NAMES]
    .reverse()
    .map((n) => s.stages[n]?.secondsPerStep)
    .find((x) => x != null);
  if (pace == null || s.state === 'done' || s.state === 'cancelled') return null;
  const remaining = STAGE_NAMES.filter((n) => spec.stages[n].enabled).reduce(
    (sum, n) => sum + stageSteps(spec, n) - (s.stages[n]?.step ?? 0),
    0,
  );
  return remaining * pace;
}
