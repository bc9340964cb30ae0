import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { StepPhase } from '../grpo/step';
import type { TrainHyperparameters } from '../modelServer/schemas';

export type Hyperparameters = Partial<TrainHyperparameters>;

export interface EvaluationResult {
  label: string;
  kind: 'policy' | 'rewardModel';
  model: string;
  metrics: Record<string, number>;
}

export interface StageStatus {
  stage: string;
  step: number;
  totalSteps: number;
  phase: StepPhase | 'evaluating' | 'paused' | 'cancelled' | 'done';
  paused: boolean;
  hyperparameters: Hyperparameters;
  latest: Record<string, number> | null;
  evaluations: EvaluationResult[];
  /** Mean wall time of the steps this workflow run trained. */
  secondsPerStep: number | null;
}

export const stageStatusQuery = defineQuery<StageStatus>('stageStatus');
export const pauseSignal = defineSignal('pause');
export const resumeSignal = defineSignal('resume');
/** Graceful: the step in flight finishes and is checkpointed; no new step starts. */
export const cancelSignal = defineSignal('cancel');
/** Validated before it is accepted; returns the settings the next step will use. */
export const setHyperparametersUpdate = defineUpdate<Hyperparameters, [Hyperparameters]>(
  'setHyperparameters',
);
/** A stage takes changes its run already validated (a workflow cannot send another an update). */
export const hyperparametersSignal = defineSignal<[Hyperparameters]>('hyperparameters');
/** A stage tells its run where it stands after each step. */
export const stageProgressSignal = defineSignal<[StageStatus]>('stageProgress');

const NUMERIC = ['learning_rate', 'clip_low', 'clip_high', 'kl_coef', 'max_grad_norm', 'micro_batch'];

/** Refuses a hyperparameter change before it is accepted, naming every bad key. */
export function validateHyperparameters(h: Hyperparameters) {
  const bad = Object.entries(h).filter(([key, value]) => {
    if (key === 'loss_aggregation') return value !== 'token-mean' && value !== 'dr-grpo';
    if (!NUMERIC.includes(key)) return true;
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return true;
    if (key === 'micro_batch' && !Number.isInteger(value)) return true;
    if (key === 'clip_low' && value > 1) return true;
    return key !== 'kl_coef' && value === 0;
  });
  if (bad.length > 0) throw new Error(`setHyperparameters: invalid ${bad.map(([k]) => k).join(', ')}`);
}
