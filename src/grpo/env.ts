/**
 * The seam between the training engine and what it trains on. An environment says what its tasks are, how a
 * group of samples of one task is produced (rollout), how each sample is rewarded, and how the model it
 * trains is evaluated. The engine (step.ts) knows nothing else about it; each environment is one file in
 * src/env/. Configs are plain data: they travel in workflow inputs.
 */
import type { AgentTemplate } from '../env/emailAgent';
import type { Split } from '../mail/question';
import type { JudgeTemplate } from '../reward/judge';
import type { RewardWeights } from '../reward/deterministic';

/** A stored sample the engine trains on: an agent episode or a judgement (rows, by id). */
export interface SampleRef {
  kind: 'trajectory' | 'judgement';
  id: number;
}

export interface Rewards {
  rewards_G: number[];
  /** 1 where the sample succeeded: a correct answer (policy), agreement with the label (reward model). */
  success_G: number[];
  /** 1 where the sample failed for a reason outside the model's answer (a failed judgement, a model error). */
  failed_G: number[];
}

export interface ScoredGroup extends Rewards {
  taskId: string;
  samples: SampleRef[];
}

/** Where a group is made: the step's key, its seed, and the model version it samples. */
export interface GroupInput {
  runId: string;
  stage: string;
  step: number;
  seed: number;
  taskId: string;
  groupSize: number;
  model: string;
}

export interface EvaluationInput {
  runId: string;
  /** Names the evaluation in the run, e.g. "policy:base" or "rewardModel:step-4". */
  label: string;
  model: string;
  split: Split;
  count: number;
  seed: number;
}

/** Progress and cancellation of the activity a sample runs in (it heartbeats after each model call). */
export interface SampleHooks {
  onTurn?: (turn: number) => void;
  signal?: AbortSignal;
}

export interface Env<C extends EnvConfig> {
  taskIds(config: C, runId: string, split: Split): Promise<string[]>;
  /** Each task's class, where every step should draw the classes in equal shares (reward model: the label). */
  taskStrata?(config: C, runId: string, split: Split): Promise<Map<string, string>>;
  rollout(config: C, group: GroupInput, hooks?: SampleHooks): Promise<SampleRef[]>;
  reward(config: C, group: GroupInput, samples: SampleRef[], hooks?: SampleHooks): Promise<Rewards>;
  evaluate(config: C, input: EvaluationInput, hooks?: SampleHooks): Promise<Record<string, number>>;
}

/** The policy: train questions → email-agent episodes → deterministic reward + weight × the judge's score. */
export interface PolicyEnvConfig {
  kind: 'policy';
  agent: AgentTemplate;
  weights: RewardWeights;
  /** "gold": the deterministic layer grades answers against the reference; "reference-free": only format,
   * valid tool use and grounding count, and correctness comes from the judge alone (the seed's setting). */
  reward: 'gold' | 'reference-free';
  judge: { model: string; weight: number; settings: JudgeTemplate };
}

/** The reward model: labelled candidate episodes → judgements by the adapter → agreement with the label. */
export interface RewardModelEnvConfig {
  kind: 'rewardModel';
  /** How the stage's groups of judgements sample. */
  judge: JudgeTemplate;
  /** How held-out evaluations sample: as the judge scores the policy (spec: judge.scoringTemperature).
   * Absent: at `judge.temperature` (a warm start's judge is already the scoring one; runs started before
   * the field existed evaluate as they did). */
  scoringTemperature?: number;
  /** Draw as many correct as incorrect candidates (seeded). */
  balance: boolean;
  seed: number;
}

/** A warm start: demonstrations built from the mailbox (policy) or from labelled candidates (judge). */
export interface WarmStartEnvConfig {
  kind: 'warmStart';
  target: 'policy' | 'judge';
  /** How many demonstrations (train questions or candidates, in a seeded order). */
  count: number;
  seed: number;
  balance: boolean;
  agent: AgentTemplate;
  judge: JudgeTemplate;
  weights: RewardWeights;
}

export type EnvConfig = PolicyEnvConfig | RewardModelEnvConfig | WarmStartEnvConfig;
export type EnvKind = EnvConfig['kind'];
export type { Split };
