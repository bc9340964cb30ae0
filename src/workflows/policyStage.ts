import {
  allHandlersFinished,
  condition,
  continueAsNew,
  defineQuery,
  defineSignal,
  defineUpdate,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { PolicyStageActivities } from '../activities/policyStage';
import type { AgentSettings } from '../env/emailAgent';
import type { TrainHyperparameters } from '../modelServer/schemas';
import type { RewardWeights } from '../reward/deterministic';
import { RUN_ID, STAGE, STATUS, STEP } from '../searchAttributes';
import { TASK_QUEUES } from '../taskQueues';

const cpu = proxyActivities<PolicyStageActivities>({
  taskQueue: TASK_QUEUES.cpu,
  startToCloseTimeout: '5 minutes',
  retry: { maximumAttempts: 5 },
});
const rollout = proxyActivities<PolicyStageActivities>({
  taskQueue: TASK_QUEUES.rollout,
  startToCloseTimeout: '1 hour', // a group of episodes on a CPU model server is slow
  heartbeatTimeout: '10 minutes', // one episode finishing per heartbeat
  retry: { maximumAttempts: 5 },
});
const gpu = proxyActivities<PolicyStageActivities>({
  taskQueue: TASK_QUEUES.gpu,
  startToCloseTimeout: '4 hours',
  heartbeatTimeout: '2 minutes', // the activity polls the server's progress every 5 s
  retry: { maximumAttempts: 10 },
});

export interface PolicyStageInput {
  runId: string;
  seed: number;
  adapter: string;
  steps: number;
  startStep: number;
  tasksPerStep: number;
  groupSize: number;
  agent: AgentSettings;
  weights: RewardWeights;
  hyperparameters: Partial<TrainHyperparameters>;
  lora: { rank: number; alpha: number };
  divideByStd: boolean;
  dynamicSampling: { enabled: boolean; minStd: number };
  continueAsNewEverySteps: number;
  startPaused?: boolean;
}

export interface PolicyStageStatus {
  step: number;
  totalSteps: number;
  phase: 'sampling' | 'rollout' | 'advantages' | 'training' | 'paused' | 'cancelled' | 'done';
  paused: boolean;
  hyperparameters: Partial<TrainHyperparameters>;
  latest: Record<string, number> | null;
}

export const policyStageStatus = defineQuery<PolicyStageStatus>('status');
export const pauseSignal = defineSignal('pause');
export const resumeSignal = defineSignal('resume');
/** Graceful: the step in flight finishes and is checkpointed; no new step starts. */
export const cancelSignal = defineSignal('cancel');
/** Validated before it is accepted; returns the settings the next step will use. */
export const setHyperparametersUpdate = defineUpdate<
  Partial<TrainHyperparameters>,
  [Partial<TrainHyperparameters>]
>('setHyperparameters');

function validateHyperparameters(h: Partial<TrainHyperparameters>) {
  const bad = Object.entries(h).filter(([key, value]) => {
    if (key === 'loss_aggregation') return value !== 'token-mean' && value !== 'dr-grpo';
    if (!['learning_rate', 'clip_low', 'clip_high', 'kl_coef', 'max_grad_norm', 'micro_batch'].includes(key))
      return true;
    return (
      typeof value !== 'number' || !Number.isFinite(value) || value < 0 || (key !== 'kl_coef' && value === 0)
    );
  });
  if (bad.length > 0) throw new Error(`setHyperparameters: invalid ${bad.map(([k]) => k).join(', ')}`);
}

/**
 * The GRPO loop of the policy stage: sample tasks → roll out a group per task → advantages → train →
 * record. Only ids and small numbers pass through history; it continues as new every N steps.
 */
export async function policyStage(input: PolicyStageInput): Promise<PolicyStageStatus> {
  const status: PolicyStageStatus = {
    step: input.startStep - 1,
    totalSteps: input.steps,
    phase: 'sampling',
    paused: input.startPaused ?? false,
    hyperparameters: input.hyperparameters,
    latest: null,
  };
  let cancelled = false;
  setHandler(policyStageStatus, () => status);
  setHandler(pauseSignal, () => void (status.paused = true));
  setHandler(resumeSignal, () => void (status.paused = false));
  setHandler(cancelSignal, () => void (cancelled = true));
  setHandler(
    setHyperparametersUpdate,
    (h) => (status.hyperparameters = { ...status.hyperparameters, ...h }),
    {
      validator: validateHyperparameters,
    },
  );
  const stage = 'policy';
  // What `evalrl run list` filters on: the run, the stage, its step and whether it runs, waits or ended.
  const publish = (state: string) =>
    upsertSearchAttributes([
      { key: RUN_ID, value: input.runId },
      { key: STAGE, value: stage },
      { key: STEP, value: status.step },
      { key: STATUS, value: state },
    ]);
  publish('running');
  for (let step = input.startStep; step <= input.steps; step++) {
    if (status.paused) {
      status.phase = 'paused';
      publish('paused');
      await condition(() => !status.paused || cancelled);
      publish('running');
    }
    if (cancelled) {
      status.phase = 'cancelled';
      publish('cancelled');
      return status;
    }
    const key = { runId: input.runId, stage, step };
    const started = Date.now();
    status.phase = 'sampling';
    const tasks = await cpu.sampleTasks({ ...key, seed: input.seed, count: input.tasksPerStep, offset: 0 });
    status.phase = 'rollout';
    const groups = await Promise.all(
      tasks.map((taskId) =>
        rollout.rolloutGroup({
          ...key,
          seed: input.seed,
          taskId,
          groupSize: input.groupSize,
          agent: input.agent,
          weights: input.weights,
        }),
      ),
    );
    const rolledOut = Date.now();
    status.phase = 'advantages';
    const selection = await cpu.computeAdvantages({
      groups,
      wanted: input.tasksPerStep,
      divideByStd: input.divideByStd,
      dynamicSampling: input.dynamicSampling,
    });
    status.phase = 'training';
    const trained = await gpu.trainStep({
      adapter: input.adapter,
      step,
      advantages: selection.advantages,
      hyperparameters: status.hyperparameters, // a setHyperparameters update applies from the next step
      lora: input.lora,
    });
    const rewards = groups.flatMap((g) => g.rewards_G);
    const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
    const metrics = {
      'reward/mean': mean,
      'reward/std': Math.sqrt(rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / rewards.length),
      'groups/kept': selection.kept.length,
      'groups/dropped': selection.dropped.length,
      'optim/loss': trained.loss,
      'optim/kl_ref': trained.kl_ref,
      'optim/clip_fraction': trained.clip_fraction,
      'optim/lr': trained.learning_rate,
      'optim/tokens': trained.tokens,
      'time/rollout_s': (rolledOut - started) / 1000,
      'time/step_s': (Date.now() - started) / 1000,
    };
    await cpu.recordStepMetrics({ ...key, metrics });
    status.step = step;
    status.latest = metrics;
    publish('running');
    if (step % input.continueAsNewEverySteps === 0 && step < input.steps && !cancelled) {
      await condition(allHandlersFinished);
      // Pause and hyperparameters carry over; the rest of the state is in PostgreSQL and the checkpoints.
      await continueAsNew<typeof policyStage>({
        ...input,
        startStep: step + 1,
        hyperparameters: status.hyperparameters,
        startPaused: status.paused,
      });
    }
  }
  status.phase = 'done';
  publish('done');
  return status;
}
