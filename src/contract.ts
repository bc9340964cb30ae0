/**
 * The Temporal contract, in one place: task queues, search attributes, the messages a run and a stage
 * accept, and the payloads that cross the boundary. Workflows, workers and clients import it; payloads carry
 * ids and small numbers, never email bodies or episodes (those stay in PostgreSQL).
 */
import { defineSearchAttributeKey } from '@temporalio/common';
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { EnvConfig } from './grpo/env';
import type { HyperparameterChange, Hyperparameters } from './hyperparameters';
import type { RunSpec } from './runSpec';

// --- task queues --------------------------------------------------------------------------------------------

/** One task queue per kind of work, so that each can be scaled and placed on its own hosts. */
export const TASK_QUEUES = {
  workflows: 'evalrl-workflows',
  rollout: 'evalrl-rollout', // sampling the model being trained or evaluated
  judge: 'evalrl-judge', // rewarding samples (the reward model's judgements, teacher labels)
  cpu: 'evalrl-cpu', // task choice, advantages, bookkeeping
  gpu: 'evalrl-gpu', // "which GPU host?"; train and publish run on that host's own queue
} as const;
export type QueueName = keyof typeof TASK_QUEUES;

/** The task queue of one GPU host: a step's train and publish run where its model server holds the weights. */
export const gpuHostQueue = (host: string) => `${TASK_QUEUES.gpu}@${host}`;

// --- search attributes (registered by `evalrl up`, upserted by the workflows) ---------------------------------

export const RUN_ID = defineSearchAttributeKey('EvalrlRunId', 'KEYWORD');
export const STAGE = defineSearchAttributeKey('EvalrlStage', 'KEYWORD');
export const STEP = defineSearchAttributeKey('EvalrlStep', 'INT');
export const STATUS = defineSearchAttributeKey('EvalrlStatus', 'KEYWORD');
export const SEARCH_ATTRIBUTES = [RUN_ID, STAGE, STEP, STATUS];

// --- payloads ----------------------------------------------------------------------------------------------

/** The stages of a run, in order. Warm starts are supervised; the other two are GRPO. */
export const STAGE_NAMES = ['policyWarmStart', 'judgeWarmStart', 'rewardModel', 'policy'] as const;
export type StageName = (typeof STAGE_NAMES)[number];

export type StepPhase = 'sampling' | 'rollout' | 'rewarding' | 'advantages' | 'training' | 'publishing';

export interface ActivityBudget {
  maximumAttempts: number;
  heartbeatTimeoutSeconds: number;
}

export interface LoraSpec {
  rank: number;
  alpha: number;
  /** Seeds a new adapter's weights, so two runs with one seed start alike. */
  init_seed?: string;
  /** Starts a new adapter as a copy of this checkpoint (`name@step-N`), e.g. a warm start's result. */
  init_from?: string;
}

/** What a stage workflow is started with: everything it needs, no bodies. */
export interface StageInput {
  runId: string;
  stage: StageName;
  seed: number;
  adapter: string;
  /** The model the stage's first step samples from (later steps sample from `adapter`). */
  startModel: string;
  steps: number;
  startStep: number;
  tasksPerStep: number;
  groupSize: number;
  env: EnvConfig;
  /** "sft": demonstrations, each trained on with advantage 1; "grpo": group-relative advantages. */
  objective: 'grpo' | 'sft';
  hyperparameters: Hyperparameters;
  lora: LoraSpec;
  keepCheckpoints: number;
  divideByStd: boolean;
  dynamicSampling: { enabled: boolean; minStd: number; maxTopUps: number };
  evaluation: {
    kind: EvaluationResult['kind'];
    everySteps: number;
    split: 'train' | 'test';
    count: number;
    /** The run evaluates the last step itself, beside its next stage (absent in inputs recorded before). */
    skipLast?: boolean;
  };
  activities: ActivityBudget;
  continueAsNewEverySteps: number;
  startPaused?: boolean;
  /** The GPU host queue that trained the stage so far: kept through continue-as-new and retry. */
  gpuHost?: string;
}

export interface EvaluationResult {
  label: string;
  kind: 'policy' | 'rewardModel';
  model: string;
  metrics: Record<string, number>;
}

export interface StageStatus {
  stage: StageName;
  step: number;
  totalSteps: number;
  /** `unknown`: read from the run's stored record because no worker answered (see src/runs/storedStatus.ts). */
  phase: StepPhase | 'evaluating' | 'paused' | 'cancelled' | 'done' | 'failed' | 'unknown';
  /** Why the stage failed (phase `failed`): its run hears it by signal, having continued as new since. */
  error?: string;
  paused: boolean;
  hyperparameters: Hyperparameters;
  latest: Record<string, number> | null;
  evaluations: EvaluationResult[];
  /** Mean wall time of the steps this workflow run trained. */
  secondsPerStep: number | null;
  /** The GPU host queue the stage trains on, once chosen. */
  gpuHost?: string;
}

export interface TrainingRunInput {
  runId: string;
  spec: RunSpec;
  /** The run's state when it continued as new (absent on its first workflow run). */
  carried?: CarriedRunState;
  /** Continue as new once the history holds this many events (default 10,000; tests set it low). */
  continueAsNewAfterEvents?: number;
}

export interface CarriedRunState {
  status: RunStatus;
  /** Phases already finished: not run again. */
  completed: RunPhase[];
  overrides: Partial<Record<StageName, HyperparameterChange>>;
  paused: boolean;
}

export type RunState = 'running' | 'paused' | 'blocked' | 'cancelled' | 'done';
/** `${stage}Evaluation`: a stage's last held-out evaluation, run beside the phases after it. */
export type RunPhase = 'prepare' | 'baseline' | StageName | `${StageName}Evaluation` | 'done';

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

/** The policy evaluation with the highest success rate (the first of equals). */
export function bestPolicyEvaluation(evaluations: EvaluationResult[]): EvaluationResult | null {
  return evaluations
    .filter((e) => e.kind === 'policy')
    .reduce<EvaluationResult | null>(
      (b, e) => (!b || e.metrics.successRate > b.metrics.successRate ? e : b),
      null,
    );
}

// --- messages ----------------------------------------------------------------------------------------------

export const runStatusQuery = defineQuery<RunStatus>('status');
export const stageStatusQuery = defineQuery<StageStatus>('stageStatus');
export const pauseSignal = defineSignal('pause');
export const resumeSignal = defineSignal('resume');
/** Graceful: the step in flight finishes and is checkpointed; no new step starts. */
export const cancelSignal = defineSignal('cancel');
/** Validated before it is accepted; returns the settings the next step will use. */
export const setHyperparametersUpdate = defineUpdate<Hyperparameters, [HyperparameterChange]>(
  'setHyperparameters',
);
/** Retries a blocked run's phase, optionally with new hyperparameters; refused (to the caller) when the run
 * is not blocked or a value is bad, so a bad retry can never wedge the run. */
export const retryUpdate = defineUpdate<{ phase: RunPhase }, [{ hyperparameters?: HyperparameterChange }]>(
  'retry',
);
/** A stage takes changes its run already validated (a workflow cannot send another an update). */
export const hyperparametersSignal = defineSignal<[HyperparameterChange]>('hyperparameters');
/** A stage tells its run where it stands after each step. */
export const stageProgressSignal = defineSignal<[StageStatus]>('stageProgress');
/** A run tells the workflow that started it (a ladder) that its warm starts are trained. */
export const warmStartsDoneSignal = defineSignal('warmStartsDone');
