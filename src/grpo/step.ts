import type { TrainHyperparameters, TrainStepResult } from '../modelServer/schemas';
import type { GrpoStageInput } from './stage';

/** A trained-on sample: an agent episode (policy stage) or a judgement (reward-model stage). */
export interface SampleRef {
  kind: 'trajectory' | 'judgement';
  id: number;
}

export interface GroupResult {
  taskId: string;
  samples: SampleRef[];
  rewards_G: number[];
  /** Share of the group's samples judged correct (policy) or agreeing with the label (reward model). */
  success_G: number[];
}

export interface StepKey {
  runId: string;
  stage: string;
  step: number;
}

export type StepPhase = 'sampling' | 'rollout' | 'judging' | 'advantages' | 'training' | 'publishing';

/** What one GRPO step calls: activities on Temporal, or the same functions in process (bench/orchestration). */
export interface GrpoStepCalls {
  sampleTasks(
    input: StepKey & { seed: number; env: GrpoStageInput['env']['kind']; count: number; offset: number },
  ): Promise<string[]>;
  rolloutGroup(
    input: StepKey & {
      seed: number;
      taskId: string;
      groupSize: number;
      adapter: string;
      env: GrpoStageInput['env'];
    },
  ): Promise<GroupResult>;
  judgeGroup(
    input: StepKey & {
      seed: number;
      taskId: string;
      groupSize: number;
      adapter: string;
      env: GrpoStageInput['env'];
      rolledOut: GroupResult | null;
    },
  ): Promise<GroupResult>;
  computeAdvantages(input: {
    groups: GroupResult[];
    wanted: number;
    divideByStd: boolean;
    dynamicSampling: { enabled: boolean; minStd: number };
  }): Promise<{
    advantages: { sample: SampleRef; advantage: number }[];
    kept: string[];
    dropped: string[];
    missing: number;
  }>;
  trainStep(input: {
    adapter: string;
    step: number;
    advantages: { sample: SampleRef; advantage: number }[];
    hyperparameters: Partial<TrainHyperparameters>;
    lora: GrpoStageInput['lora'];
    keepCheckpoints: number;
  }): Promise<TrainStepResult>;
  publishAdapter(input: StepKey & { adapter: string; checkpoint: string; sha256: string }): Promise<void>;
  recordStepMetrics(input: StepKey & { metrics: Record<string, number> }): Promise<void>;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
const std = (xs: number[]) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)));

/**
 * One GRPO step, the same for both stages: sample tasks → a group of episodes per task (rolled out, then
 * judged) → group-relative advantages, topping up with fresh tasks while dynamic sampling drops groups →
 * train once → publish the new adapter → record the step's metrics.
 */
export async function grpoStep(
  calls: GrpoStepCalls,
  s: GrpoStageInput,
  step: number,
  hyperparameters: Partial<TrainHyperparameters>,
  onPhase: (phase: StepPhase) => void = () => {},
): Promise<Record<string, number>> {
  const key = { runId: s.runId, stage: s.stage, step };
  const started = Date.now();
  const groups: GroupResult[] = [];
  let wanted = s.tasksPerStep;
  let selection: Awaited<ReturnType<GrpoStepCalls['computeAdvantages']>> | undefined;
  for (let round = 0; round <= s.dynamicSampling.maxTopUps && wanted > 0; round++) {
    onPhase('sampling');
    const tasks = await calls.sampleTasks({
      ...key,
      seed: s.seed,
      env: s.env.kind,
      count: wanted,
      offset: groups.length,
    });
    if (tasks.length === 0) break; // the task pool is exhausted: train on what was kept
    onPhase('rollout');
    const task = { ...key, seed: s.seed, groupSize: s.groupSize, adapter: s.adapter, env: s.env };
    groups.push(
      ...(await Promise.all(
        tasks.map(async (taskId) => {
          const rolledOut = s.env.kind === 'policy' ? await calls.rolloutGroup({ ...task, taskId }) : null;
          return calls.judgeGroup({ ...task, taskId, rolledOut });
        }),
      )),
    );
    onPhase('advantages');
    selection = await calls.computeAdvantages({
      groups,
      wanted: s.tasksPerStep,
      divideByStd: s.divideByStd,
      dynamicSampling: s.dynamicSampling,
    });
    wanted = s.dynamicSampling.enabled ? selection.missing : 0;
  }
  if (!selection) throw new Error(`step ${step}: no tasks to sample`);
  const rolledOut = Date.now();
  onPhase('training');
  const trained = await calls.trainStep({
    adapter: s.adapter,
    step,
    advantages: selection.advantages,
    hyperparameters, // a setHyperparameters update applies from the next step
    lora: s.lora,
    keepCheckpoints: s.keepCheckpoints,
  });
  const trainedAt = Date.now();
  onPhase('publishing');
  await calls.publishAdapter({
    ...key,
    adapter: s.adapter,
    checkpoint: trained.checkpoint,
    sha256: trained.sha256,
  });
  const rewards = groups.flatMap((g) => g.rewards_G);
  const metrics = {
    'reward/mean': mean(rewards),
    'reward/std': std(rewards),
    'success/rate': mean(groups.flatMap((g) => g.success_G)),
    'groups/sampled': groups.length,
    'groups/kept': selection.kept.length,
    'groups/dropped': selection.dropped.length,
    'optim/loss': trained.loss,
    'optim/kl_ref': trained.kl_ref,
    'optim/clip_fraction': trained.clip_fraction,
    'optim/grad_norm': trained.grad_norm,
    'optim/lr': trained.learning_rate,
    'optim/tokens': trained.tokens,
    'time/rollout_s': (rolledOut - started) / 1000,
    'time/train_s': (trainedAt - rolledOut) / 1000,
    'time/step_s': (Date.now() - started) / 1000,
  };
  await calls.recordStepMetrics({ ...key, metrics });
  return metrics;
}
