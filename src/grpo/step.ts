import type { StageInput, StepPhase } from '../contract';
import type { Hyperparameters } from '../hyperparameters';
import type { TrainStepResult } from '../modelServer/schemas';
import type { GroupInput, SampleRef, ScoredGroup } from './env';
import { samplingModel } from './stage';

export interface StepKey {
  runId: string;
  stage: string;
  step: number;
}

export interface Selection {
  advantages: { sample: SampleRef; advantage: number }[];
  kept: string[];
  dropped: string[];
  missing: number;
}

/** What one step calls: activities on Temporal, or the same functions in process (bench/orchestration). */
export interface StepCalls {
  sampleTasks(
    input: StepKey & {
      env: StageInput['env'];
      objective: StageInput['objective'];
      seed: number;
      count: number;
      offset: number;
    },
  ): Promise<string[]>;
  rolloutGroup(input: GroupInput & { env: StageInput['env'] }): Promise<SampleRef[]>;
  rewardGroup(input: GroupInput & { env: StageInput['env']; samples: SampleRef[] }): Promise<ScoredGroup>;
  computeAdvantages(input: {
    groups: ScoredGroup[];
    wanted: number;
    objective: StageInput['objective'];
    divideByStd: boolean;
    dynamicSampling: { enabled: boolean; minStd: number };
  }): Promise<Selection>;
  trainStep(input: {
    adapter: string;
    step: number;
    objective: StageInput['objective'];
    advantages: Selection['advantages'];
    hyperparameters: Hyperparameters;
    lora: StageInput['lora'];
    keepCheckpoints: number;
  }): Promise<TrainStepResult>;
  recordAdapterVersion(
    input: StepKey & { adapter: string; checkpoint: string; sha256: string },
  ): Promise<void>;
  recordStepMetrics(input: StepKey & { metrics: Record<string, number> }): Promise<void>;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
const std = (xs: number[]) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)));

/**
 * One step of the engine, the same for every environment: sample tasks → per task a group of samples
 * (rollout) and their rewards → advantages, topping up with fresh tasks while dynamic sampling drops groups
 * whose rewards do not vary → train once → record the adapter version → record the step's metrics.
 */
export async function grpoStep(
  calls: StepCalls,
  s: StageInput,
  step: number,
  hyperparameters: Hyperparameters,
  onPhase: (phase: StepPhase) => void = () => {},
): Promise<Record<string, number>> {
  const key = { runId: s.runId, stage: s.stage, step };
  const started = Date.now();
  const groups: ScoredGroup[] = [];
  let wanted = s.tasksPerStep;
  let selection: Selection | undefined;
  for (let round = 0; round <= s.dynamicSampling.maxTopUps && wanted > 0; round++) {
    onPhase('sampling');
    const tasks = await calls.sampleTasks({
      ...key,
      env: s.env,
      objective: s.objective,
      seed: s.seed,
      count: wanted,
      offset: groups.length,
    });
    if (tasks.length === 0) break; // the task pool is exhausted: train on what was kept
    const group = (taskId: string): GroupInput => ({
      ...key,
      seed: s.seed,
      taskId,
      groupSize: s.groupSize,
      model: samplingModel(s, step),
    });
    onPhase('rollout');
    const samples = await Promise.all(tasks.map((t) => calls.rolloutGroup({ ...group(t), env: s.env })));
    onPhase('rewarding');
    groups.push(
      ...(await Promise.all(
        tasks.map((t, i) => calls.rewardGroup({ ...group(t), env: s.env, samples: samples[i] })),
      )),
    );
    onPhase('advantages');
    selection = await calls.computeAdvantages({
      groups,
      wanted: s.tasksPerStep,
      objective: s.objective,
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
    objective: s.objective,
    advantages: selection.advantages,
    hyperparameters, // a setHyperparameters update applies from the next step
    lora: s.lora,
    keepCheckpoints: s.keepCheckpoints,
  });
  const trainedAt = Date.now();
  onPhase('publishing');
  await calls.recordAdapterVersion({
    ...key,
    adapter: s.adapter,
    checkpoint: trained.checkpoint,
    sha256: trained.sha256,
  });
  const metrics = stepMetrics(groups, selection, trained, { started, rolledOut, trainedAt });
  await calls.recordStepMetrics({ ...key, metrics });
  return metrics;
}

/** The step's flat, slash-keyed metrics: rewards, the learning signal's health, the optimizer, timing. */
export function stepMetrics(
  groups: ScoredGroup[],
  selection: Selection,
  trained: TrainStepResult,
  t: { started: number; rolledOut: number; trainedAt: number },
): Record<string, number> {
  const rewards = groups.flatMap((g) => g.rewards_G);
  const samples = groups.flatMap((g) => g.failed_G);
  return {
    'reward/mean': mean(rewards),
    'reward/std': std(rewards),
    'success/rate': mean(groups.flatMap((g) => g.success_G)),
    'groups/sampled': groups.length,
    'groups/kept': selection.kept.length,
    'groups/dropped': selection.dropped.length,
    'groups/zero_variance': groups.length
      ? groups.filter((g) => std(g.rewards_G) < 1e-9).length / groups.length
      : 0,
    'samples/failed': mean(samples),
    'samples/trained': selection.advantages.filter((a) => a.advantage !== 0).length,
    'optim/loss': trained.loss,
    'optim/kl_ref': trained.kl_ref,
    'optim/approx_kl_old': trained.approx_kl_old,
    'optim/mismatch_kl': trained.mismatch_kl,
    'optim/is_weight_mean': trained.is_weight_mean,
    'optim/is_capped_fraction': trained.is_capped_fraction,
    'optim/clip_fraction': trained.clip_fraction,
    'optim/grad_norm': trained.grad_norm,
    'optim/update_norm': trained.update_norm,
    'optim/no_signal': trained.no_signal ? 1 : 0,
    'optim/lr': trained.learning_rate,
    'optim/tokens': trained.tokens,
    'time/rollout_s': (t.rolledOut - t.started) / 1000,
    'time/train_s': (t.trainedAt - t.rolledOut) / 1000,
    'time/step_s': (Date.now() - t.started) / 1000,
  };
}
