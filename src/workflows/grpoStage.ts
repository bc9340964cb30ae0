import {
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { GrpoStageInput } from '../grpo/stage';
import { grpoStep, type GrpoStepCalls } from '../grpo/step';
import { RUN_ID, STAGE, STATUS, STEP } from '../searchAttributes';
import {
  cancelSignal,
  hyperparametersSignal,
  pauseSignal,
  resumeSignal,
  setHyperparametersUpdate,
  stageProgressSignal,
  stageStatusQuery,
  validateHyperparameters,
  type Hyperparameters,
  type StageStatus,
} from './messages';
import { activityProxies } from './proxies';

/**
 * One GRPO stage, the same loop for the reward model and the policy (the environment is the only
 * difference): a step at a time, pausable, cancellable after a checkpoint, with hyperparameters that can
 * change between steps. Only ids and small numbers pass through history; it continues as new every N steps.
 */
export async function grpoStage(input: GrpoStageInput): Promise<StageStatus> {
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
  const change = (h: Hyperparameters) => (status.hyperparameters = { ...status.hyperparameters, ...h });
  setHandler(setHyperparametersUpdate, change, { validator: validateHyperparameters });
  setHandler(hyperparametersSignal, (h) => void change(h));
  const parent = workflowInfo().parent;
  const report = async (state: string) => {
    // What `evalrl run list` filters on, and what the run's status shows.
    upsertSearchAttributes([
      { key: RUN_ID, value: input.runId },
      { key: STAGE, value: input.stage },
      { key: STEP, value: status.step },
      { key: STATUS, value: state },
    ]);
    if (parent) await getExternalWorkflowHandle(parent.workflowId).signal(stageProgressSignal, status);
  };

  // A step's train and publish go to the host that answers first and stay there (its server holds the weights).
  const onHost = host(await gpu.gpuHost());
  const calls: GrpoStepCalls = {
    sampleTasks: cpu.sampleTasks,
    rolloutGroup: rollout.rolloutGroup,
    judgeGroup: judge.judgeGroup,
    computeAdvantages: cpu.computeAdvantages,
    trainStep: onHost.trainStep,
    publishAdapter: onHost.publishAdapter,
    recordStepMetrics: cpu.recordStepMetrics,
  };
  let trainedSeconds = 0;
  await report('running');
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
    if (step % input.evaluation.everySteps === 0 || step === input.steps) {
      status.phase = 'evaluating';
      status.evaluations.push(
        await rollout.evaluate({
          runId: input.runId,
          label: `${input.stage}:step-${step}`,
          kind: input.stage,
          model: input.adapter,
          split: input.evaluation.split,
          count: input.evaluation.questions,
          seed: input.seed,
          agent: input.env.agent,
          judge: input.env.kind === 'policy' ? input.env.judge.settings : input.env.judge,
          weights: input.env.weights,
        }),
      );
    }
    await report('running');
    const due = step % input.continueAsNewEverySteps === 0 || workflowInfo().continueAsNewSuggested;
    if (due && step < input.steps && !cancelled) {
      await condition(allHandlersFinished);
      // Pause and hyperparameters carry over; the rest of the state is in PostgreSQL and the checkpoints.
      await continueAsNew<typeof grpoStage>({
        ...input,
        startStep: step + 1,
        hyperparameters: status.hyperparameters,
        startPaused: status.paused,
      });
    }
  }
  status.phase = cancelled ? 'cancelled' : 'done';
  await report(status.phase);
  return status;
}
