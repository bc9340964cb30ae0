import {
  allHandlersFinished,
  condition,
  ContinueAsNew,
  continueAsNew,
  getExternalWorkflowHandle,
  ParentClosePolicy,
  patched,
  setHandler,
  startChild,
  upsertSearchAttributes,
  workflowInfo,
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
  warmStartsDoneSignal,
  type EvaluationResult,
  type CarriedRunState,
  type RunPhase,
  type RunStatus,
  type StageName,
  type StageStatus,
  type TrainingRunInput,
} from '../contract';
import {
  agentTemplate,
  samplingModel,
  stageAdapter,
  stageInput,
  stageSteps,
  untrainedJudge,
} from '../grpo/stage';
import { parseHyperparameterChange, type HyperparameterChange } from '../hyperparameters';
import { rootMessage } from '../rootMessage';
import type { RunSpec } from '../runSpec';
import { grpoStage } from './grpoStage';
import { activityProxies } from './proxies';

const isStage = (phase: RunPhase): phase is StageName => (STAGE_NAMES as readonly string[]).includes(phase);
/** Whether work started early succeeded: its phase awaits it and, when it failed, does it again, guarded. */
const succeeded = (work: Promise<unknown>) =>
  work.then(
    () => true,
    () => false,
  );
const stageEnded = (s: StageStatus | undefined) =>
  s?.phase === 'done' || s?.phase === 'cancelled' || s?.phase === 'failed';

/**
 * A training run: the policy's warm start → the reward model's labelled data (the base policy's evaluation
 * beside it) → the judge's warm start → the untrained judge's evaluation → the reward model's GRPO stage → the
 * policy's GRPO stage, judged by the reward model it just trained; each stage's last held-out evaluation runs
 * beside what follows it. Each part is optional in the spec. A phase
 * that fails after its retries does not fail the run: the run waits in `blocked` until `retry` (optionally
 * with new hyperparameters) or `cancel`. Its history grows with its stages' progress reports, so it continues
 * as new when it is long, even in the middle of a stage: the stage workflow runs on (it is abandoned, not
 * closed) and the next run waits for its end.
 */
export async function trainingRun(input: TrainingRunInput): Promise<RunStatus> {
  const { runId, spec, carried } = input;
  const { cpu, rollout } = activityProxies(spec.activities);
  const status: RunStatus = carried?.status ?? {
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
  const completed: RunPhase[] = carried?.completed ?? [];
  const overrides: Partial<Record<StageName, HyperparameterChange>> = carried?.overrides ?? {};
  let paused = carried?.paused ?? false;
  let cancelled = false;
  // Histories recorded before this patch keep their stages as closing children and never continue as new.
  const mayContinueAsNew = patched('run-continues-as-new');
  const historyFull = () =>
    mayContinueAsNew &&
    (workflowInfo().continueAsNewSuggested ||
      workflowInfo().historyLength >= (input.continueAsNewAfterEvents ?? 10_000));
  let retryAsked = false;
  const child = () => (status.stageWorkflowId ? getExternalWorkflowHandle(status.stageWorkflowId) : null);
  const enabled = STAGE_NAMES.filter((s) => spec.stages[s].enabled);
  const needsCandidates = spec.stages.rewardModel.enabled || spec.stages.judgeWarmStart.enabled;
  // What follows a stage needs only the weights it ends with, so its last held-out evaluation runs beside the
  // phases after it and is awaited at the run's end (histories recorded before these patches evaluated it
  // inside the stage): the warm starts' beside the data, the baseline and the GRPO stages, the trained
  // judge's beside the policy stage.
  const warmStartsEvaluatedBeside = patched('warm-starts-evaluated-beside');
  const evaluatedBeside: Record<StageName, boolean> = {
    policyWarmStart: spec.stages.policyWarmStart.enabled && warmStartsEvaluatedBeside,
    judgeWarmStart: spec.stages.judgeWarmStart.enabled && warmStartsEvaluatedBeside,
    rewardModel:
      spec.stages.rewardModel.enabled &&
      spec.stages.policy.enabled &&
      patched('reward-model-evaluated-beside-policy'),
    policy: false,
  };
  const evaluationsBeside: Partial<Record<StageName, Promise<boolean>>> = {};
  // The base policy's evaluation needs no trained weights: it samples beside the data's episodes, whose
  // batches have room for it (histories recorded before this patch evaluated it in the baseline phase).
  const baselineBesideData =
    needsCandidates && spec.evaluation.baseline && patched('baseline-evaluated-beside-data');
  let baselineEarly: Promise<boolean> | undefined;

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

  /** Runs a phase (once); when it fails after its retries, the run is `blocked` until retry or cancel. */
  async function guarded(phase: RunPhase, work: () => Promise<unknown>): Promise<boolean> {
    if (completed.includes(phase)) return true;
    status.phase = phase;
    publish();
    for (let retries = 0; ; retries++) {
      await condition(() => !paused || cancelled);
      if (cancelled) return false;
      try {
        await work();
        if (!cancelled) completed.push(phase);
        return !cancelled;
      } catch (err) {
        if (err instanceof ContinueAsNew) throw err;
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

  /** Starts the stage's workflow, or finds it running after a continue-as-new, and waits for its end. */
  async function runStage(stage: StageName) {
    const workflowId = `${runId}/${stage}`;
    if (status.stageWorkflowId !== workflowId) {
      const startStep = await cpu.nextStep({ runId, stage });
      const stageArgs = stageInput(spec, runId, stage);
      if (evaluatedBeside[stage]) stageArgs.evaluation.skipLast = true;
      if (startStep > stageArgs.steps) return; // trained before a retry of a later phase
      status.stageWorkflowId = workflowId;
      if (status.stages[stage]) status.stages[stage] = { ...status.stages[stage], phase: 'sampling' };
      const child = await startChild(grpoStage, {
        workflowId,
        taskQueue: TASK_QUEUES.workflows,
        parentClosePolicy: mayContinueAsNew ? ParentClosePolicy.ABANDON : undefined,
        args: [
          {
            ...stageArgs,
            startStep,
            hyperparameters: { ...stageArgs.hyperparameters, ...overrides[stage] },
            startPaused: paused,
            gpuHost: status.stages[stage]?.gpuHost, // a retry trains where the stage trained before
          },
        ],
      });
      await Promise.race([
        child.result().then((result) => (status.stages[stage] = result)),
        condition(historyFull),
      ]);
    } else {
      // Started by an earlier run of this workflow: its end (or failure) comes as its last progress signal.
      await condition(() => stageEnded(status.stages[stage]) || historyFull());
    }
    const end = status.stages[stage]!;
    if (!stageEnded(end)) await continueAsNewRun();
    if (end.phase === 'failed') throw new Error(end.error ?? `stage ${stage} failed`);
    mergeEvaluations(end.evaluations);
    status.stageWorkflowId = null;
  }

  async function continueAsNewRun(): Promise<never> {
    await condition(allHandlersFinished);
    const state: CarriedRunState = { status, completed, overrides, paused };
    return continueAsNew<typeof trainingRun>({ ...input, carried: state });
  }

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
  // A ladder starts its second run from this one's warm starts as soon as they exist (told again after a
  // continue-as-new: the flag it sets is idempotent). A parent that is gone is not this run's concern.
  const tellParentWarmStartsDone = async () => {
    const parent = workflowInfo().parent;
    if (parent && patched('run-tells-parent-of-warm-starts'))
      await getExternalWorkflowHandle(parent.workflowId)
        .signal(warmStartsDoneSignal)
        .catch(() => undefined);
    return true;
  };
  const stage = (name: StageName) => async () => {
    if (!spec.stages[name].enabled) return true;
    return (
      (await guarded(name, () => runStage(name))) && (!evaluatedBeside[name] || startEvaluationBeside(name))
    );
  };

  /** The evaluation a stage's last step would have run (as grpoStage runs it). */
  async function evaluateStageEnd(name: StageName) {
    const s = stageInput(spec, runId, name);
    mergeEvaluations([
      await rollout.evaluate({
        runId,
        label: `${name}:step-${s.steps}`,
        kind: s.evaluation.kind,
        model: samplingModel(s, s.steps + 1),
        env: s.env,
        split: s.evaluation.split,
        count: s.evaluation.count,
        seed: s.seed,
      }),
    ]);
  }

  /** Starts a stage's last evaluation, unless done; a paused run starts it when resumed, a cancelled one never. */
  async function startEvaluationBeside(name: StageName) {
    await condition(() => !paused || cancelled);
    if (cancelled) return false;
    const phase: RunPhase = `${name}Evaluation`;
    if (!completed.includes(phase)) evaluationsBeside[name] = succeeded(evaluateStageEnd(name));
    return true;
  }

  /** Awaits the evaluations run beside, in stage order; one whose early try failed is tried again, guarded. */
  async function finishEvaluationsBeside() {
    for (const name of STAGE_NAMES) {
      if (!evaluatedBeside[name]) continue;
      const early = evaluationsBeside[name] ?? Promise.resolve(false);
      const ok = await guarded(`${name}Evaluation`, async () => {
        if (!(await early)) await evaluateStageEnd(name);
      });
      if (!ok) return false;
    }
    return true;
  }

  // A bad spec, a taken adapter name or missing questions fail the run before anything starts.
  if (!carried) await cpu.registerRun({ runId, spec });
  const ok =
    (await stage('policyWarmStart')()) &&
    (!needsCandidates ||
      (await guarded('prepare', () => {
        if (baselineBesideData) baselineEarly ??= succeeded(evaluate('policy:base', 'policy', 'base'));
        return Promise.all([
          candidates('train', data.trainQuestions),
          candidates('test', data.testQuestions),
        ]);
      }))) &&
    (await stage('judgeWarmStart')()) &&
    (await tellParentWarmStartsDone()) &&
    (await guarded('baseline', async () => {
      // Tried again here when its early try failed.
      if (spec.evaluation.baseline && !(await (baselineEarly ?? false)))
        await evaluate('policy:base', 'policy', 'base');
      if (spec.stages.rewardModel.enabled && !spec.stages.judgeWarmStart.enabled)
        await evaluate('rewardModel:untrained', 'rewardModel', untrainedJudge(spec));
    })) &&
    (await stage('rewardModel')()) &&
    (await stage('policy')()) &&
    (await finishEvaluationsBeside());
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
