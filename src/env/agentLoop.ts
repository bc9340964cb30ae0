import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import type { ChatMessage, ToolCall } from '../modelServer/schemas';
import { chatTemplateKwargs, sentBack } from './thinking';
import type { Turn } from './trajectory';

/** A tool in OpenAI's format. */
export interface ToolSpec {
  type: 'function';
  function: { name: string; description?: string; parameters: unknown };
}

export interface LoopSettings {
  model: string;
  maxTurns: number;
  /** The model's context window: no request asks for more. */
  contextTokens: number;
  maxTokensPerTurn: number;
  temperature: number;
  topP: number;
  /** Turn t samples with seed + t, so a replayed loop asks for the same samples. */
  seed?: number;
  /** Qwen3's thinking (the chat template's `enable_thinking`); absent, as in stages started before it: off. */
  thinking?: boolean;
  timeoutMs: number;
}

/** What a tool call did: text for the model, or the end of the loop. */
export type CallOutcome = { content: string; done?: boolean };

export interface LoopHandlers {
  /** Runs one tool call. `args` is the parsed JSON object (a call whose arguments are not one is an error the
   * loop reports to the model itself). */
  call(name: string, args: Record<string, unknown>): Promise<CallOutcome>;
  /** A reply with no tool call: may still end the loop (a verdict written as plain JSON); else an error. */
  text?(content: string): CallOutcome | null;
  /** After each model call (the activity heartbeats here). */
  onTurn?(turn: number): void;
}

export type LoopEnding = 'done' | 'max_turns' | 'context_budget' | 'malformed' | 'model_error';

export interface LoopResult {
  messages: ChatMessage[];
  turns: Turn[];
  ending: LoopEnding;
  /** Replies without a usable tool call, and calls whose arguments were not a JSON object. */
  malformed: number;
  /** Why the loop ended as model_error (a reply the endpoint could not produce or parse). */
  error: string | null;
}

/** A sampler refusal that is the caller's fault (a bad setting): the run must stop and name it. */
export class BadSamplingRequest extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BadSamplingRequest';
  }
}

/**
 * The sampled tokens in a completion: the model server's and vLLM's ids (vLLM's with `return_token_ids`),
 * logprobs as the model server adds them or, from vLLM, in OpenAI's `logprobs.content`.
 */
interface SampledTokens {
  prompt_token_ids?: number[];
  choices: {
    token_ids?: number[];
    token_logprobs?: number[];
    logprobs?: { content?: { logprob: number }[] | null } | null;
  }[];
}

/**
 * Sampling fields every request sends although they only say "no truncation, no penalty": a field a request
 * leaves out, vLLM fills from the model's generation_config.json (Qwen3: top_k 20) while it returns the raw
 * logprobs, and GRPO's ratio would then compare a truncated policy with an untruncated one.
 */
export const UNTRUNCATED = { top_k: 0, min_p: 0, repetition_penalty: 1 } as const; // top_k 0: vLLM's "all"

const MALFORMED_IN_A_ROW = 2;
const CHARS_PER_TOKEN = 3; // a cautious estimate for text the server has not tokenised yet
const MIN_TURN_TOKENS = 16;
const NO_CALL =
  'Error: no tool call found. Reply with <tool_call>, a JSON object with "name" and "arguments", and </tool_call>.';

/**
 * The one chat/tool-call loop, shared by the email agent and the Skill-RM judge: sample a reply, run its tool
 * calls, feed the results back, until a handler says done or a budget (turns, context) runs out. Everything
 * the model does wrong is data: a reply without a call, arguments that are not JSON, an unknown tool are
 * errors sent back to it and counted; a context overflow ends the loop. Only the endpoint failing (network,
 * 5xx) or refusing a setting (BadSamplingRequest) throws.
 */
export async function agentLoop(
  llm: OpenAI,
  start: ChatMessage[],
  tools: ToolSpec[],
  s: LoopSettings,
  handlers: LoopHandlers,
  signal?: AbortSignal,
): Promise<LoopResult> {
  const messages = [...start];
  const result: LoopResult = { messages, turns: [], ending: 'max_turns', malformed: 0, error: null };
  let knownTokens = 0; // prompt + completion tokens of the last call, as the server counted them
  let unknownChars =
    messages.reduce((n, m) => n + (m.content?.length ?? 0), 0) + JSON.stringify(tools).length;
  let malformedInARow = 0;

  for (let turn = 0; turn < s.maxTurns; turn++) {
    signal?.throwIfAborted();
    const maxTokens = Math.min(
      s.maxTokensPerTurn,
      s.contextTokens - knownTokens - Math.ceil(unknownChars / CHARS_PER_TOKEN),
    );
    if (maxTokens < MIN_TURN_TOKENS) return { ...result, ending: 'context_budget' };
    const t0 = Date.now();
    const reply = await complete(llm, messages, tools, s, maxTokens, turn, signal);
    if (reply === 'context_budget') return { ...result, ending: 'context_budget' };
    const choice = reply.choices[0];
    if (!choice) return { ...result, ending: 'model_error', error: 'the endpoint returned no choice' };
    const sampled = reply as unknown as SampledTokens;
    knownTokens = reply.usage?.total_tokens ?? knownTokens;
    unknownChars = 0;
    const content = choice.message.content ?? null;
    const calls = (choice.message.tool_calls ?? []).filter((c): c is ToolCall => c.type === 'function');
    messages.push(
      sentBack({ role: 'assistant', content, ...(calls.length ? { tool_calls: calls } : {}) }, s),
    );
    const t1 = Date.now();
    const record: Turn = {
      promptTokenIds: sampled.prompt_token_ids,
      tokenIds: sampled.choices[0]?.token_ids,
      logprobs:
        sampled.choices[0]?.token_logprobs ?? sampled.choices[0]?.logprobs?.content?.map((c) => c.logprob),
      finishReason: choice.finish_reason,
      model: reply.model,
      modelMs: t1 - t0,
      toolMs: 0,
    };
    result.turns.push(record);
    handlers.onTurn?.(turn + 1);

    let done = false;
    if (calls.length === 0) {
      const outcome = handlers.text?.(content ?? '') ?? null;
      if (outcome?.done) return { ...result, ending: 'done' };
      result.malformed++;
      const error = outcome?.content ?? NO_CALL;
      messages.push({ role: 'user', content: error });
      unknownChars += error.length;
      if (++malformedInARow >= MALFORMED_IN_A_ROW) return { ...result, ending: 'malformed' };
      continue;
    }
    malformedInARow = 0;
    for (const call of calls) {
      const args = parseObject(call.function.arguments);
      const outcome: CallOutcome = args
        ? await handlers.call(call.function.name, args)
        : { content: `Error: the arguments of ${call.function.name} are not a JSON object.` };
      if (!args) result.malformed++;
      messages.push({ role: 'tool', tool_call_id: call.id, content: outcome.content });
      unknownChars += outcome.content.length;
      if (outcome.done) {
        done = true;
        break;
      }
    }
    record.toolMs = Date.now() - t1;
    if (done) return { ...result, ending: 'done' };
  }
  return result;
}

/** One completion; a refusal because the prompt outgrew the context ends the loop, any other 4xx names the setting. */
async function complete(
  llm: OpenAI,
  messages: ChatMessage[],
  tools: ToolSpec[],
  s: LoopSettings,
  maxTokens: number,
  turn: number,
  signal?: AbortSignal,
): Promise<OpenAI.Chat.Completions.ChatCompletion | 'context_budget'> {
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await completeOnce(llm, messages, tools, s, maxTokens, turn, signal);
    } catch (err) {
      // A sampler that is busy (429: its queue or its concurrent requests are full) did no work: wait as it
      // asks (Retry-After) or back off, within BUSY_BUDGET_MS, instead of failing the episode as a bad request.
      if (!(err instanceof OpenAI.APIError) || err.status !== 429) throw err;
      const asked = Number(err.headers?.get?.('retry-after'));
      const wait =
        Number.isFinite(asked) && asked > 0
          ? Math.min(asked, 30) * 1000
          : Math.min(5000, 500 * 2 ** (attempt - 1));
      if (Date.now() - started + wait > BUSY_BUDGET_MS || signal?.aborted) throw err;
      await sleep(wait, undefined, { signal });
    }
  }
}

/** How long one turn waits while the sampler answers 429. */
export const BUSY_BUDGET_MS = 60_000;

async function completeOnce(
  llm: OpenAI,
  messages: ChatMessage[],
  tools: ToolSpec[],
  s: LoopSettings,
  maxTokens: number,
  turn: number,
  signal?: AbortSignal,
): Promise<OpenAI.Chat.Completions.ChatCompletion | 'context_budget'> {
  try {
    return await llm.chat.completions.create(
      {
        model: s.model,
        messages: messages as OpenAI.Chat.Completions.ChatCompletionMessageParam[],
        tools: tools as OpenAI.Chat.Completions.ChatCompletionTool[],
        temperature: s.temperature,
        top_p: s.topP,
        max_tokens: maxTokens,
        seed: s.seed === undefined ? undefined : s.seed + turn,
        ...UNTRUNCATED,
        logprobs: true,
        ...{ return_token_ids: true }, // vLLM's: the prompt's and the sample's token ids, what training needs
        ...{ chat_template_kwargs: chatTemplateKwargs(s) },
      },
      { timeout: s.timeoutMs, maxRetries: 0, signal },
    );
  } catch (err) {
    const busy = err instanceof OpenAI.APIError && err.status === 429; // retried by complete()
    if (
      err instanceof OpenAI.APIError &&
      err.status !== undefined &&
      err.status >= 400 &&
      err.status < 500 &&
      !busy
    ) {
      if (isContextOverflow(err.message)) return 'context_budget';
      throw new BadSamplingRequest(`sampler refused the request (${err.status}): ${err.message}`);
    }
    throw err;
  }
}

/** The model server's and vLLM's wording for a prompt that no longer fits the context. */
export function isContextOverflow(message: string): boolean {
  return /exceeds the model's context|maximum context length|context length is|too many tokens/i.test(
    message,
  );
}

function parseObject(text: string): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(text || '{}');
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}
