import { z } from 'zod';
import type { LoraSpec } from '../contract';
import type { Hyperparameters } from '../hyperparameters';

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
  /** vLLM's field for an assistant turn's thinking, which the chat template renders (src/env/thinking.ts). */
  reasoning: z.string().optional(),
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

export interface TrainStepRequest {
  adapter: string;
  step: number;
  sequences: TrainSequence[];
  /** "sft": a warm start on demonstrations (advantage-weighted log-likelihood); GRPO otherwise. */
  objective?: 'grpo' | 'sft';
  hyperparameters: Partial<Hyperparameters>;
  /** A new adapter's LoRA shape; `init_seed` seeds its weights (default: its name), `init_from` copies a checkpoint. */
  lora?: LoraSpec;
  /** Checkpoint retention for this adapter: the newest N steps are kept (step 0 always; 0 keeps all). */
  keep_checkpoints?: number;
}

export const trainStepResultSchema = z.object({
  adapter: z.string(),
  step: z.number().int(),
  loss: z.number(),
  clip_fraction: z.number(),
  approx_kl_old: z.number(),
  /**
   * The sampler–trainer mismatch over the sampled tokens, whether or not TIS corrects it: k3 estimate of
   * KL(sampler ‖ trainer), the mean importance weight (capped when TIS is on), the fraction of tokens capped.
   * 0: not measured (a demonstration step, a step without signal, a checkpoint from before them).
   */
  mismatch_kl: z.number().default(0),
  is_weight_mean: z.number().default(0),
  is_capped_fraction: z.number().default(0),
  kl_ref: z.number(),
  entropy: z.number(),
  grad_norm: z.number(),
  /** L2 norm of the weights' change in this step. */
  update_norm: z.number().default(0),
  /** No sample carried an advantage (and no KL term): the server left the weights and optimizer as they were. */
  no_signal: z.boolean().default(false),
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
  /** The evalrl model server's: the tokens that end a sampled turn. */
  eos_token_ids: z.array(z.number().int()).default([]),
});
export type TokenizeResult = z.infer<typeof tokenizeResultSchema>;

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
