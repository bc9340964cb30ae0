import { z } from 'zod';

/**
 * A stage's training hyperparameters, once: the model server's wire names, defaults and bounds. The run
 * spec, `evalrl run set`/`retry`, the workflows' update validators and the model-server client use this
 * schema; the Python server's pydantic model is checked against its JSON export
 * (trainer/hyperparameters.schema.json, compared by test/unit/hyperparameters.test.ts and
 * trainer/tests/test_contract.py), so a value one side accepts the other accepts too.
 */
const bounds = {
  learning_rate: z.number().gt(0).max(1),
  clip_low: z.number().min(0).max(1),
  clip_high: z.number().min(0).max(10),
  kl_coef: z.number().min(0).max(10),
  max_grad_norm: z.number().gt(0).max(1000),
  loss_aggregation: z.enum(['token-mean', 'dr-grpo']),
  /**
   * Truncated importance sampling (verl's rollout IS): each token's loss weighted by min(π_trainer / π_sampler,
   * cap), the trainer's own logprobs as the ratio's old policy. For a sampler that is another engine (vLLM);
   * 0: off (the sampler's logprobs are the old policy).
   */
  tis_imp_ratio_cap: z.number().min(0).max(100),
};

export const hyperparametersSchema = z.strictObject({
  learning_rate: bounds.learning_rate.default(1e-5),
  clip_low: bounds.clip_low.default(0.2),
  clip_high: bounds.clip_high.default(0.28),
  kl_coef: bounds.kl_coef.default(0),
  max_grad_norm: bounds.max_grad_norm.default(1),
  loss_aggregation: bounds.loss_aggregation.default('token-mean'),
  tis_imp_ratio_cap: bounds.tis_imp_ratio_cap.default(0),
});
export type Hyperparameters = z.infer<typeof hyperparametersSchema>;

/** A change to some hyperparameters (`evalrl run set`, `retry`): no defaults, every key optional. */
export const hyperparameterChangeSchema = z.strictObject(bounds).partial();
export type HyperparameterChange = z.infer<typeof hyperparameterChangeSchema>;

export const HYPERPARAMETER_NAMES = Object.keys(bounds) as (keyof Hyperparameters)[];

/** Thrown for a change the server would refuse; names every bad key and why. */
export class HyperparameterError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HyperparameterError';
  }
}

/** Validates a change; a bad key or value is an error naming it (the workflows' update validators call this). */
export function parseHyperparameterChange(value: unknown): HyperparameterChange {
  const parsed = hyperparameterChangeSchema.safeParse(value);
  if (!parsed.success)
    throw new HyperparameterError(
      parsed.error.issues
        .map((i) => `${i.path.join('.') || ('keys' in i ? i.keys.join(', ') : '(change)')}: ${i.message}`)
        .join('; '),
    );
  return parsed.data;
}

/** `key=value` pairs from the command line, values typed by the schema, then validated. */
export function parseAssignments(pairs: string[]): HyperparameterChange {
  const change: Record<string, string | number> = {};
  for (const pair of pairs) {
    const [key, value, ...rest] = pair.split('=');
    if (!key || value === undefined || value === '' || rest.length)
      throw new HyperparameterError(
        `"${pair}": expected key=value with key one of ${HYPERPARAMETER_NAMES.join(', ')}`,
      );
    change[key] = key === 'loss_aggregation' || !Number.isFinite(Number(value)) ? value : Number(value);
  }
  return parseHyperparameterChange(change);
}

/** The schema as JSON Schema: what the Python contract test reads (trainer/hyperparameters.schema.json). */
export function hyperparametersJsonSchema() {
  const schema: Record<string, unknown> = z.toJSONSchema(hyperparametersSchema, { io: 'input' });
  delete schema.$schema; // the dialect's address is not part of the contract
  return schema;
}
