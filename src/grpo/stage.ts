import type { AgentSettings } from '../env/emailAgent';
import type { TrainHyperparameters } from '../modelServer/schemas';
import type { RewardWeights } from '../reward/deterministic';
import type { JudgeSettings } from '../reward/judge';
import type { RunSpec } from '../runSpec';

export type StageName = 'rewardModel' | 'policy';

/** Agent and judge settings without the model: each step picks the adapter version it samples from. */
export type AgentTemplate = Omit<AgentSettings, 'model' | 'seed'>;
export type JudgeTemplate = Omit<JudgeSettings, 'model' | 'seed'>;

/**
 * What differs between the two stages. The policy's episodes are email searches rewarded by the
 * deterministic layer plus `judge.weight` × the reward model's score; the reward model's episodes are
 * judgements of stored candidate episodes, rewarded by agreement with the teacher's label.
 */
export type StageEnvironment =
  | {
      kind: 'policy';
      agent: AgentTemplate;
      weights: RewardWeights;
      judge: { model: string; weight: number; settings: JudgeTemplate };
    }
  | { kind: 'rewardModel'; judge: JudgeTemplate; weights: RewardWeights; agent: AgentTemplate };

export interface ActivityBudget {
  maximumAttempts: number;
  heartbeatTimeoutSeconds: number;
}

export interface GrpoStageInput {
  runId: string;
  stage: StageName;
  seed: number;
  adapter: string;
  steps: number;
  startStep: number;
  tasksPerStep: number;
  groupSize: number;
  env: StageEnvironment;
  hyperparameters: Partial<TrainHyperparameters>;
  lora: { rank: number; alpha: number; init_seed?: string };
  keepCheckpoints: number;
  divideByStd: boolean;
  dynamicSampling: { enabled: boolean; minStd: number; maxTopUps: number };
  evaluation: { everySteps: number; split: 'train' | 'test'; questions: number };
  activities: ActivityBudget;
  continueAsNewEverySteps: number;
  startPaused?: boolean;
}

export function agentTemplate(spec: RunSpec): AgentTemplate {
  const s = spec.sampling;
  return {
    maxTurns: s.maxTurns,
    contextTokens: s.contextTokens,
    maxTokensPerTurn: s.maxTokensPerTurn,
    temperature: s.temperature,
    topP: s.topP,
    timeoutMs: s.timeoutSeconds * 1000,
    demonstration: s.demonstration,
  };
}

export function judgeTemplate(spec: RunSpec): JudgeTemplate {
  return {
    mode: spec.judge.mode,
    maxTurns: spec.judge.maxTurns,
    maxTokensPerTurn: spec.sampling.maxTokensPerTurn,
    temperature: spec.sampling.temperature,
    retries: spec.judge.retries,
    timeoutMs: spec.sampling.timeoutSeconds * 1000,
  };
}

export function hyperparameters(s: RunSpec['stages'][StageName]): Partial<TrainHyperparameters> {
  return {
    learning_rate: s.learningRate,
    clip_low: s.clipLow,
    clip_high: s.clipHigh,
    kl_coef: s.klCoef,
    loss_aggregation: s.lossAggregation,
    max_grad_norm: s.maxGradNorm,
    micro_batch: s.microBatch,
  };
}

/** A stage of a run, from its spec. `judgeModel` is what scores the policy: the trained RM adapter or `base`. */
export function stageInput(
  spec: RunSpec,
  runId: string,
  stage: StageName,
  judgeModel: string,
): Omit<GrpoStageInput, 'startStep'> {
  const s = spec.stages[stage];
  const env: StageEnvironment =
    stage === 'policy'
      ? {
          kind: 'policy',
          agent: agentTemplate(spec),
          weights: spec.rewardWeights,
          judge: { model: judgeModel, weight: spec.judge.weight, settings: judgeTemplate(spec) },
        }
      : {
          kind: 'rewardModel',
          judge: judgeTemplate(spec),
          weights: spec.rewardWeights,
          agent: agentTemplate(spec), // the candidates' turn budget, which their labels read
        };
  return {
    runId,
    stage,
    seed: spec.seed,
    adapter: spec.models[stage].adapter,
    steps: s.steps,
    tasksPerStep: s.tasksPerStep,
    groupSize: s.groupSize,
    env,
    hyperparameters: hyperparameters(s),
    // From the run's seed, not the adapter's name: two runs with one seed start from the same weights.
    lora: { ...spec.lora, init_seed: `${spec.seed}:${stage}` },
    keepCheckpoints: spec.checkpoints.keepLast,
    divideByStd: s.divideByStd,
    dynamicSampling: s.dynamicSampling,
    evaluation: spec.evaluation,
    activities: spec.activities,
    continueAsNewEverySteps: spec.continueAsNewEverySteps,
  };
}

/** Step N samples from the adapter as step N-1 left it; before step 1 trains it, that is the base model. */
export const samplingModel = (adapter: string, step: number) => (step <= 1 ? 'base' : adapter);
