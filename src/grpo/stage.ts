import type { StageInput, StageName } from '../contract';
import type { AgentTemplate } from '../env/emailAgent';
import type { JudgeTemplate } from '../reward/judge';
import type { RunSpec } from '../runSpec';
import type { EnvConfig } from './env';

/** The thinking switch as every sampling loop takes it: on, each turn has the budget's room on top of its own. */
function withThinking(spec: RunSpec, maxTokensPerTurn: number) {
  return {
    thinking: spec.thinking !== undefined,
    maxTokensPerTurn: maxTokensPerTurn + (spec.thinking?.budgetTokens ?? 0),
  };
}

export function agentTemplate(spec: RunSpec): AgentTemplate {
  const s = spec.sampling;
  return {
    maxTurns: s.maxTurns,
    contextTokens: s.contextTokens,
    ...withThinking(spec, s.maxTokensPerTurn),
    temperature: s.temperature,
    topP: s.topP,
    timeoutMs: s.timeoutSeconds * 1000,
    demonstration: s.demonstration,
    searchHits: s.searchHits,
    bodyChars: s.bodyChars,
  };
}

/** The judge's settings when it trains (its GRPO groups) or when it scores (the policy's reward, evaluations). */
export function judgeTemplate(spec: RunSpec, use: 'training' | 'scoring'): JudgeTemplate {
  const j = spec.judge;
  return {
    mode: j.mode,
    reference: j.reference,
    maxTurns: j.maxTurns,
    ...withThinking(spec, j.maxTokensPerTurn),
    contextTokens: spec.sampling.contextTokens,
    temperature: use === 'scoring' ? (j.scoringTemperature ?? j.temperature) : j.temperature,
    topP: 1,
    retries: j.retries,
    timeoutMs: spec.sampling.timeoutSeconds * 1000,
  };
}

/** The adapter a stage trains: warm starts train their own, which the GRPO stages then start from. */
export function stageAdapter(spec: RunSpec, stage: StageName): string {
  switch (stage) {
    case 'policyWarmStart':
      return `${spec.models.policy.adapter}-warm`;
    case 'judgeWarmStart':
      return `${spec.models.rewardModel.adapter}-warm`;
    default:
      return spec.models[stage].adapter;
  }
}

/** Steps of a stage: GRPO stages say so; a warm start makes `epochs` passes over its demonstrations. */
export function stageSteps(spec: RunSpec, stage: StageName): number {
  if (stage === 'policy' || stage === 'rewardModel') return spec.stages[stage].steps;
  const w = spec.stages[stage];
  return Math.ceil((w.demonstrations * w.epochs) / w.tasksPerStep);
}

export function stageEnabled(spec: RunSpec, stage: StageName): boolean {
  return spec.stages[stage].enabled;
}

/** Where a GRPO stage's adapter starts: the given checkpoint, else its warm start's last step, else fresh. */
export function initialCheckpoint(spec: RunSpec, stage: 'policy' | 'rewardModel'): string | undefined {
  const warm = stage === 'policy' ? 'policyWarmStart' : 'judgeWarmStart';
  if (spec.models[stage].initFrom) return spec.models[stage].initFrom;
  return stageEnabled(spec, warm) ? `${stageAdapter(spec, warm)}@step-${stageSteps(spec, warm)}` : undefined;
}

/** The reward model before its GRPO stage: the judge's warm start, else the base model. */
export function untrainedJudge(spec: RunSpec): string {
  return initialCheckpoint(spec, 'rewardModel') ?? 'base';
}

/**
 * What judges the policy stage: this run's trained reward model at its last step (by address, as a sampling
 * pool holds it), else the spec's judge, else the untrained one.
 */
export function policyJudge(spec: RunSpec): string {
  if (stageEnabled(spec, 'rewardModel'))
    return `${stageAdapter(spec, 'rewardModel')}@step-${stageSteps(spec, 'rewardModel')}`;
  return spec.judge.model ?? untrainedJudge(spec);
}

function envOf(spec: RunSpec, stage: StageName): EnvConfig {
  const agent = agentTemplate(spec);
  const judge = judgeTemplate(spec, 'training');
  const scoring = judgeTemplate(spec, 'scoring');
  switch (stage) {
    case 'policyWarmStart':
    case 'judgeWarmStart':
      return {
        kind: 'warmStart',
        target: stage === 'policyWarmStart' ? 'policy' : 'judge',
        count: spec.stages[stage].demonstrations,
        seed: spec.seed,
        balance: spec.rewardModelData.balance,
        agent,
        judge: scoring, // what its demonstrations show, and how its evaluation samples
        weights: spec.rewardWeights,
      };
    case 'rewardModel':
      return {
        kind: 'rewardModel',
        judge,
        scoringTemperature: scoring.temperature,
        balance: spec.rewardModelData.balance,
        seed: spec.seed,
      };
    case 'policy':
      return {
        kind: 'policy',
        agent,
        weights: spec.rewardWeights,
        reward: spec.reward,
        judge: { model: policyJudge(spec), weight: spec.judge.weight, settings: scoring },
      };
  }
}

/** A stage of a run, from its spec (the run adds where it starts). */
export function stageInput(spec: RunSpec, runId: string, stage: StageName): Omit<StageInput, 'startStep'> {
  const warm = stage === 'policyWarmStart' || stage === 'judgeWarmStart';
  const s = spec.stages[stage];
  const grpo = warm ? null : spec.stages[stage as 'policy' | 'rewardModel'];
  const initFrom = warm ? undefined : initialCheckpoint(spec, stage as 'policy' | 'rewardModel');
  return {
    runId,
    stage,
    seed: spec.seed,
    adapter: stageAdapter(spec, stage),
    startModel: initFrom ?? 'base',
    steps: stageSteps(spec, stage),
    tasksPerStep: s.tasksPerStep,
    groupSize: grpo?.groupSize ?? 1,
    env: envOf(spec, stage),
    objective: warm ? 'sft' : 'grpo',
    hyperparameters: s.hyperparameters,
    // From the run's seed, not the adapter's name: two runs with one seed start from the same weights.
    lora: { ...spec.lora, init_seed: `${spec.seed}:${stage}`, ...(initFrom ? { init_from: initFrom } : {}) },
    keepCheckpoints: spec.checkpoints.keepLast,
    divideByStd: grpo?.divideByStd ?? false,
    dynamicSampling: grpo?.dynamicSampling ?? { enabled: false, minStd: 0, maxTopUps: 0 },
    evaluation: {
      kind: stage === 'policy' || stage === 'policyWarmStart' ? 'policy' : 'rewardModel',
      everySteps: warm ? Number.MAX_SAFE_INTEGER : spec.evaluation.everySteps,
      split: spec.evaluation.split,
      count:
        stage === 'rewardModel' || stage === 'judgeWarmStart'
          ? spec.evaluation.rewardModelEpisodes
          : spec.evaluation.questions,
    },
    activities: spec.activities,
    continueAsNewEverySteps: spec.continueAsNewEverySteps,
  };
}

/**
 * Step N samples from the version step N-1 trained, by its address (`adapter@step-N-1`); step 1 from where the
 * stage starts. Every sample names its version: a step redone after a crash samples what it first sampled,
 * and a sampling server that does not hold that version refuses rather than answers from another.
 */
export const samplingModel = (s: Pick<StageInput, 'adapter' | 'startModel'>, step: number) =>
  step <= 1 ? s.startModel : `${s.adapter}@step-${step - 1}`;
