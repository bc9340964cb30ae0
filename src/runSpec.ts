import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { hyperparametersSchema } from './hyperparameters';
import { rewardWeightsSchema } from './reward/deterministic';

/** An adapter name (letters, digits, _ and -), short enough for the "-warm" of its warm start. */
const adapterName = z.string().regex(/^[A-Za-z][A-Za-z0-9_-]{0,57}$/, 'letters, digits, _ and -, at most 58');
/** A checkpoint to start from: `name@step-N`. */
const checkpointAddress = z.string().regex(/^[A-Za-z][A-Za-z0-9_-]{0,63}@step-\d+$/, 'expected name@step-N');

/**
 * Temporal's limits that a GRPO step meets (self-hosted defaults, docs.temporal.io/self-hosted-guide/defaults):
 * a step schedules one rollout (then one reward) activity per task, all at once — at most 2,000 pending
 * activities per workflow (limit.numPendingActivities.error) — and passes every sample of the step (a stored
 * sample's reference and rewards, under 128 bytes as JSON) to one activity — at most 2 MiB per payload.
 */
export const TEMPORAL_MAX_PENDING_ACTIVITIES = 2000;
export const TEMPORAL_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024;
const BYTES_PER_SAMPLE = 128;
export const MAX_SAMPLES_PER_STEP = TEMPORAL_MAX_PAYLOAD_BYTES / BYTES_PER_SAMPLE; // 16,384

const grpoStageSchema = z.strictObject({
  enabled: z.boolean().default(true),
  steps: z.number().int().min(1),
  tasksPerStep: z
    .number()
    .int()
    .min(1)
    .max(
      TEMPORAL_MAX_PENDING_ACTIVITIES,
      `at most ${TEMPORAL_MAX_PENDING_ACTIVITIES}: each task is one pending activity and Temporal fails a workflow with more than ${TEMPORAL_MAX_PENDING_ACTIVITIES} (limit.numPendingActivities.error)`,
    ),
  groupSize: z
    .number()
    .int()
    .min(2, 'GRPO needs at least 2 samples per group')
    .max(
      MAX_SAMPLES_PER_STEP,
      `at most ${MAX_SAMPLES_PER_STEP}: a step's samples travel in one Temporal payload, at most 2 MiB`,
    ),
  hyperparameters: hyperparametersSchema.prefault({}),
  divideByStd: z.boolean().default(true),
  dynamicSampling: z
    .strictObject({
      enabled: z.boolean().default(true),
      minStd: z.number().min(0).default(0.01),
      /** Rounds of fresh tasks when too many groups were dropped. */
      maxTopUps: z.number().int().min(0).default(2),
    })
    .prefault({}),
});

/** A supervised warm start: `demonstrations` scripted episodes, `epochs` passes, `tasksPerStep` per step. */
const warmStartSchema = z.strictObject({
  enabled: z.boolean().default(false),
  demonstrations: z.number().int().min(1).default(32),
  epochs: z.number().int().min(1).default(2),
  tasksPerStep: z.number().int().min(1).default(8),
  hyperparameters: hyperparametersSchema.prefault({ learning_rate: 1e-3 }),
});

const modelSchema = z.strictObject({
  adapter: adapterName,
  /** Start the GRPO stage's adapter from this checkpoint instead of a warm start of this run. */
  initFrom: checkpointAddress.optional(),
});

/** A training run, as written in YAML or JSON. Validated before anything starts. */
export const runSpecSchema = z.strictObject({
  name: z.string().min(1).max(64),
  seed: z.number().int().min(0),
  models: z.strictObject({ policy: modelSchema, rewardModel: modelSchema }),
  lora: z
    .strictObject({ rank: z.number().int().min(1).max(512), alpha: z.number().int().min(1) })
    .prefault({ rank: 16, alpha: 32 }),
  /** The policy agent's episodes. */
  sampling: z
    .strictObject({
      temperature: z.number().min(0).max(2).default(1), // vLLM refuses more than 2
      topP: z.number().gt(0).max(1).default(1),
      maxTurns: z.number().int().min(1).default(6),
      maxTokensPerTurn: z.number().int().min(16).default(256),
      contextTokens: z.number().int().min(256).default(8192),
      /** A worked example before the question (small models follow a shown format far better). */
      demonstration: z.boolean().default(false),
      timeoutSeconds: z.number().positive().default(600),
      /** Search hits and email body characters a tool result shows: what the context must hold. */
      searchHits: z.number().int().min(1).max(10).default(10),
      bodyChars: z.number().int().min(200).default(4000),
    })
    .prefault({}),
  /** The Skill-RM judge: the reward model being trained, and the judge of the policy. */
  judge: z
    .strictObject({
      mode: z.enum(['baseline', 'skill']).default('skill'),
      /** "hidden": reference-free judging (the seed's setting); "visible": the judge sees the gold answer. */
      reference: z.enum(['visible', 'hidden']).default('hidden'),
      maxTurns: z.number().int().min(1).default(8),
      maxTokensPerTurn: z.number().int().min(16).default(192),
      /** How the reward-model stage samples its groups of judgements: GRPO learns from their variety. */
      temperature: z.number().min(0).max(2).default(1), // vLLM refuses more than 2
      /** How the judge samples when it scores: the policy's episodes and the held-out evaluations
       * (default: `temperature`). 0 makes the reward a function of the episode, not of the judge's luck. */
      scoringTemperature: z.number().min(0).max(2).optional(),
      retries: z.number().int().min(0).default(2),
      /** The policy's reward = deterministic part + weight × the judge's score. */
      weight: z.number().min(0).default(1),
      /** The judge of the policy stage when this run trains no reward model (e.g. another run's adapter). */
      model: z.string().min(1).optional(),
    })
    .prefault({}),
  /**
   * Qwen3's thinking, for the policy and the judge: every request sends `chat_template_kwargs.enable_thinking`.
   * Absent: off (Qwen3 thinks unless told not to). Given: on, and each turn may sample `budgetTokens` more than
   * its `maxTokensPerTurn`, room for the reasoning before the answer.
   */
  thinking: z.strictObject({ budgetTokens: z.number().int().min(1) }).optional(),
  /** The policy's reward: graded against the gold answer, or only its reference-free part + the judge. */
  reward: z.enum(['gold', 'reference-free']).default('reference-free'),
  rewardWeights: rewardWeightsSchema.prefault({}),
  stages: z.strictObject({
    policyWarmStart: warmStartSchema.prefault({}),
    judgeWarmStart: warmStartSchema.prefault({}),
    rewardModel: grpoStageSchema,
    policy: grpoStageSchema,
  }),
  /** The reward model's labelled episodes: from the base and warm-started policies and corrupted copies. */
  rewardModelData: z
    .strictObject({
      trainQuestions: z.number().int().min(1).default(16),
      testQuestions: z.number().int().min(1).default(8),
      episodesPerQuestion: z.number().int().min(1).default(2),
      /** Each question's scripted episode (search, read the gold email, answer): correct by construction. */
      scripted: z.boolean().default(true),
      /** Corrupted copies of correct episodes (a plausible wrong answer from the same email): hard negatives. */
      corrupt: z.boolean().default(true),
      /** Keep as many correct as incorrect episodes, so that agreement is not won by one label. */
      balance: z.boolean().default(true),
    })
    .prefault({}),
  evaluation: z
    .strictObject({
      everySteps: z.number().int().min(1).default(5),
      split: z.enum(['train', 'test']).default('test'),
      questions: z.number().int().min(1).default(50),
      /** Held-out labelled episodes for the reward model's evaluations. */
      rewardModelEpisodes: z.number().int().min(1).default(40),
      /** Evaluate the base policy before training (a ladder's second run reuses the first's). */
      baseline: z.boolean().default(true),
    })
    .prefault({}),
  /**
   * Each adapter keeps its newest `keepLast` steps and step 0 (0: all; a 4B model's step is ~400 MB). What a run
   * reads back is always an adapter's newest step: a warm start's final step (a GRPO stage's `initFrom`), a
   * stage's last step (its evaluations), the step before the one training (its rollouts).
   */
  checkpoints: z.strictObject({ keepLast: z.number().int().min(0).default(5) }).prefault({}),
  continueAsNewEverySteps: z.number().int().min(1).default(10),
  /** Retry budget and liveness of every activity; a stage that exhausts it waits in `blocked`. */
  activities: z
    .strictObject({
      maximumAttempts: z.number().int().min(1).default(5),
      heartbeatTimeoutSeconds: z.number().int().min(5).default(120),
    })
    .prefault({}),
});
export type RunSpec = z.infer<typeof runSpecSchema>;

/** A spec refused before anything starts: every bad field, by its path. */
export class RunSpecError extends Error {
  constructor(
    readonly source: string,
    readonly problems: string[],
  ) {
    super(`${source}: invalid run spec\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'RunSpecError';
  }
}

export function parseRunSpec(value: unknown, source = 'run spec'): RunSpec {
  const parsed = runSpecSchema.safeParse(value);
  if (!parsed.success) {
    throw new RunSpecError(
      source,
      parsed.error.issues.map(
        (i) =>
          `${[...i.path, ...(i.code === 'unrecognized_keys' ? i.keys : [])].join('.') || '(root)'}: ${i.message}`,
      ),
    );
  }
  const spec = parsed.data;
  const problems: string[] = [];
  if (spec.models.policy.adapter === spec.models.rewardModel.adapter)
    problems.push('models.rewardModel.adapter: must differ from the policy adapter');
  if (spec.stages.judgeWarmStart.enabled && spec.judge.mode !== 'skill')
    problems.push('stages.judgeWarmStart: demonstrations are skill-mode judgements; set judge.mode: skill');
  if (spec.reward === 'reference-free' && spec.judge.weight === 0 && spec.stages.policy.enabled)
    problems.push(
      'judge.weight: a reference-free reward needs the judge (weight > 0): nothing else grades answers',
    );
  for (const stage of ['rewardModel', 'policy'] as const) {
    const g = spec.stages[stage];
    const rounds = g.dynamicSampling.enabled ? 1 + g.dynamicSampling.maxTopUps : 1;
    const samples = g.tasksPerStep * g.groupSize * rounds;
    if (g.enabled && samples > MAX_SAMPLES_PER_STEP)
      problems.push(
        `stages.${stage}: tasksPerStep × groupSize${rounds > 1 ? ' × (1 + dynamicSampling.maxTopUps)' : ''} = ${samples} samples per step, more than ${MAX_SAMPLES_PER_STEP}: they travel in one Temporal payload, at most 2 MiB`,
      );
  }
  if (problems.length) throw new RunSpecError(source, problems);
  return spec;
}

/** Reads a YAML or JSON file (YAML is a superset of JSON). */
export function loadRunSpec(file: string): RunSpec {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    throw new RunSpecError(file, ['(file): cannot be read']);
  }
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (err) {
    throw new RunSpecError(file, [`(syntax): ${(err as Error).message.split('\n')[0]}`]);
  }
  return parseRunSpec(value, file);
}
