import {
  ActivityFailure,
  allHandlersFinished,
  condition,
  ContinueAsNew,
  continueAsNew,
  getExternalWorkflowHandle,
  isCancellation,
  patched,
  setHandler,
  TimeoutFailure,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import {
  cancelSignal,
  hyperparametersSignal,
  pauseSignal,
  resumeSignal,
  RUN_ID,
  setHyperparametersUpdate,
  STAGE,
  stageProgressSignal,
  stageStatusQuery,
  STATUS,
  STEP,
  type StageInput,
  type StageStatus,
} from '../contract';
import { samplingModel } from '../grpo/stage';
import { grpoStep, type StepCalls } from '../grpo/step';
import { parseHyperparameterChange, type HyperparameterChange } from '../hyperparameters';
import { rootMessage } from '../rootMessage';
import { activityProxies } from './proxies';

/** How often a stage tells its run of a step (besides pauses, continue-as-new and its end). */
const PROGRESS_EVERY_STEPS = 10;

/**
 * One training stage — a warm start (supervised) or a GRPO stage of the reward model or the policy; the same
 * loop, the environment is the only difference: a step at a time, pausable, cancellable after a checkpoint,
 * with hyperparameters that can change between steps. Only ids and small numbers pass through history; it
 * continues as new every N steps or when Temporal suggests it.
 */
export async function grpoStage(input: StageInput): Promise<StageStatus> {
  const { cpu, rollout, judge, gpu, host } = activityProxies(input.activities);
  const status: StageStatus = {
    stage: input.stage,
    step: input.startStep - 1,
    totalSteps: input.steps,
    phase: 'sampling',
    paused: input.startPaused ?? false,
    hyperparameters: input.hyperparameters,
    latest: null,
    evaluations: [],
    secondsPerStep: null,
  };
  let cancelled = false;
  setHandler(stageStatusQuery, () => status);
  setHandler(pauseSignal, () => void (status.paused = true));
  setHandler(resumeSignal, () => void (status.paused = false));
  setHandler(cancelSignal, () => void (cancelled = true));
  const change = (h: HyperparameterChange) => (status.hyperparameters = { ...status.hyperparameters, ...h });
  setHandler(setHyperparametersUpdate, change, { validator: parseHyperparameterChange });
  setHandler(hyperparametersSignal, (h) => void change(h));
  const parent = workflowInfo().parent;
  // The run hears of every step in histories recorded before this patch; since, of every tenth and of every
  // change of state: its history then holds runs of 100,000 steps (`run status` asks the stage itself).
  const sparseProgress = patched('stage-progress-every-ten-steps');
  const report = async (state: string, step?: number) => {
    // What `evalrl run list` filters on, and what the run's status shows.
    upsertSearchAttributes([
      { key: RUN_ID, value: input.runId },
      { key: STAGE, value: input.stage },
      { key: STEP, value: status.step },
      { key: STATUS, value: state },
    ]);
    if (!parent || (sparseProgress && step !== undefined && step % PROGRESS_EVERY_STEPS !== 0)) return;
    await getExternalWorkflowHandle(parent.workflowId).signal(stageProgressSignal, status);
  };

  // Training goes to the host that answers first and stays there, through continue-as-new and retry (its
  // server holds the weights). A host that no longer takes work is gone: the next one to answer takes over
  // from the stage's last checkpoint on shared storage.
  status.gpuHost = input.gpuHost ?? (await gpu.gpuHost());
  const trainStep: StepCalls['trainStep'] = async (args) => {
    for (;;) {
      try {
        return await host(status.gpuHost!).trainStep(args);
      } catch (err) {
        if (!hostGone(err)) throw err;
        status.gpuHost = await gpu.gpuHost();
      }
    }
  };
  const calls: StepCalls = {
    sampleTasks: cpu.sampleTasks,
    rolloutGroup: rollout.rolloutGroup,
    rewardGroup: judge.rewardGroup,
    computeAdvantages: cpu.computeAdvantages,
    trainStep,
    recordAdapterVersion: cpu.recordAdapterVersion,
    recordStepMetrics: cpu.recordStepMetrics,
  };
  await report('running');
  try {
    await trainSteps();
  } catch (err) {
    // A run that continued as new since it started this stage hears of the failure only from this signal.
    if (!isCancellation(err) && !(err instanceof ContinueAsNew) && patched('stage-reports-failure')) {
      status.phase = 'failed';
      status.error = rootMessage(err);
      await report('failed');
    }
    throw err;
  }
  status.phase = cancelled ? 'cancelled' : 'done';
  await report(status.phase);
  return status;

  async function trainSteps() {
    let trainedSeconds = 0;
    for (let step = input.startStep; step <= input.steps; step++) {
      if (status.paused) {
        status.phase = 'paused';
        await report('paused');
        await condition(() => !status.paused || cancelled);
        await report('running');
      }
      if (cancelled) break;
      const metrics = await grpoStep(
        calls,
        input,
        step,
        status.hyperparameters,
        (phase) => (status.phase = phase),
      );
      status.step = step;
      status.latest = metrics;
      trainedSeconds += metrics['time/step_s'];
      status.secondsPerStep = trainedSeconds / (step - input.startStep + 1);
      const evaluated =
        step === input.steps ? !input.evaluation.skipLast : step % input.evaluation.everySteps === 0;
      if (evaluated) {
        status.phase = 'evaluating';
        status.evaluations.push(
          await rollout.evaluate({
            runId: input.runId,
            label: `${input.stage}:step-${step}`,
            kind: input.evaluation.kind,
            model: samplingModel(input, step + 1), // the version this step trained
            split: input.evaluation.split,
            count: input.evaluation.count,
            seed: input.seed,
            env: input.env,
          }),
        );
      }
      const due = step % input.continueAsNewEverySteps === 0 || workflowInfo().continueAsNewSuggested;
      await report('running', due || step === input.steps ? undefined : step);
      if (due && step < input.steps && !cancelled) {
        await condition(allHandlersFinished);
        // Pause and hyperparameters carry over; the rest of the state is in PostgreSQL and the checkpoints.
        await continueAsNew<typeof grpoStage>({
          ...input,
          startStep: step + 1,
          hyperparameters: status.hyperparameters,
          startPaused: status.paused,
          gpuHost: status.gpuHost,
        });
      }
    }
  }
}

/** A train step no worker of its host picked up in time: the host is gone. */
const hostGone = (err: unknown) =>
  err instanceof ActivityFailure &&
  err.cause instanceof TimeoutFailure &&
  err.cause.timeoutType === 'SCHEDULE_TO_START';
