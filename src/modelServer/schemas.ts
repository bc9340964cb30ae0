import { z } from 'zod';

/** The model server's wire types (trainer/evalrl_trainer/server.py), validated where they enter TypeScript. */
export const toolCallSchema = z.object({
  id: z.string(),
  type: z.literal('function'),
  function: z.object({ name: z.string(), arguments: z.string() }),
});
export type ToolCall = z.infer<typeof toolCallSchema>;

export const chatMessageSchema = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string().nullable(),
  tool_calls: z.array(toolCallSchema).optional(),
  tool_call_id: z.string().optional(),
});
export type ChatMessage = z.infer<typeof chatMessageSchema>;

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  tools?: { type: 'function'; function: { name: string; description?: string; parameters: unknown } }[];
  temperature?: number;
  top_p?: number;
  max_tokens?: number;
  n?: number;
  seed?: number;
  stop?: string[];
  ignore_eos?: boolean;
}

export const chatCompletionSchema = z.object({
  id: z.string(),
  model: z.string(),
  prompt_token_ids: z.array(z.number().int()),
  choices: z.array(
    z.object({
      index: z.number().int(),
      message: z.object({
        role: z.literal('assistant'),
        content: z.string().nullable(),
        tool_calls: z.array(toolCallSchema).optional(),
      }),
      finish_reason: z.enum(['stop', 'length', 'tool_calls']),
      token_ids: z.array(z.number().int()),
      token_logprobs: z.array(z.number()),
    }),
  ),
  usage: z.object({ prompt_tokens: z.number(), completion_tokens: z.number(), total_tokens: z.number() }),
});
export type ChatCompletion = z.infer<typeof chatCompletionSchema>;

export const trainSequenceSchema = z.object({
  token_ids: z.array(z.number().int().nonnegative()).min(2),
  mask: z.array(z.union([z.literal(0), z.literal(1)])),
  logprobs: z.array(z.number()),
  advantage: z.number().finite(),
});
export type TrainSequence = z.infer<typeof trainSequenceSchema>;

export const trainHyperparametersSchema = z.object({
  learning_rate: z.number().positive(),
  clip_low: z.number().min(0).max(1),
  clip_high: z.number().min(0),
  kl_coef: z.number().min(0),
  max_grad_norm: z.number().positive(),
  loss_aggregation: z.enum(['token-mean', 'dr-grpo']),
  /** "sft": a warm start on demonstrations (advantage-weighted log-likelihood); GRPO otherwise. */
  objective: z.enum(['grpo', 'sft']),
  micro_batch: z.number().int().positive(),
});
export type TrainHyperparameters = z.infer<typeof trainHyperparametersSchema>;

export interface TrainStepRequest {
  adapter: string;
  step: number;
  sequences: TrainSequence[];
  hyperparameters: Partial<TrainHyperparameters>;
  /** `init_seed` seeds a new adapter's weights (default: its name), so runs with one seed start alike. */
  lora?: { rank: number; alpha: number; init_seed?: string };
  /** Checkpoint retention for this adapter: the newest N steps are kept (step 0 always; 0 keeps all). */
  keep_checkpoints?: number;
}

export const trainStepResultSchema = z.object({
  adapter: z.string(),
  step: z.number().int(),
  loss: z.number(),
  clip_fraction: z.number(),
  approx_kl_old: z.number(),
  kl_ref: z.number(),
  entropy: z.number(),
  grad_norm: z.number(),
  tokens: z.number(),
  seconds: z.number(),
  learning_rate: z.number(),
  /** The step's adapter folder on the server's host, and the SHA-256 of its weights. */
  checkpoint: z.string(),
  sha256: z.string(),
  cached: z.boolean(),
});
export type TrainStepResult = z.infer<typeof trainStepResultSchema>;

export const tokenizeResultSchema = z.object({
  tokens: z.array(z.number().int()),
  count: z.number().int(),
  max_model_len: z.number().int(),
});

export const trainProgressSchema = z.object({
  adapter: z.string(),
  running: z.boolean(),
  latest_step: z.number().int().nullable(),
  step: z.number().int().optional(),
  micro_batches_done: z.number().int().optional(),
  micro_batches: z.number().int().optional(),
  seconds: z.number().optional(),
});
export type TrainProgress = z.infer<typeof trainProgressSchema>;
