import { setTimeout as sleep } from 'node:timers/promises';
import type { z } from 'zod';
import {
  chatCompletionSchema,
  tokenizeResultSchema,
  trainProgressSchema,
  trainStepResultSchema,
  type ChatCompletion,
  type ChatMessage,
  type ChatRequest,
  type TrainProgress,
  type TrainStepRequest,
  type TokenizeResult,
  type TrainSequence,
  type TrainStepResult,
} from './schemas';
import { chunkSequences, requestDigest, stepSettings } from './trainChunks';

/**
 * An error from the model server; `retryable` is false for a 4xx (the request itself is wrong) but 429 (busy).
 * `unreachable`: no connection at all (a restarting server); `retryAfterMs`: what a 429 or 503 asked for.
 */
export class ModelServerError extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly retryable: boolean,
    readonly unreachable = false,
    readonly retryAfterMs?: number,
  ) {
    super(message);
    this.name = 'ModelServerError';
  }
}

export interface ModelServerOptions {
  url: string;
  token?: string;
  timeoutMs?: number;
  /** Attempts for idempotent calls (the first included); non-idempotent calls are tried once. */
  attempts?: number;
  /** A train step whose JSON is larger goes in chunks of at most this (under the server's --max-request-mb). */
  chunkBytes?: number;
  /**
   * How long an idempotent call waits for an unreachable server to come back (a restart), beyond its attempts;
   * default 120 s, a stage's default heartbeat timeout (the train step heartbeats meanwhile).
   */
  unreachableBudgetMs?: number;
  /** How long any call, chat included (a 429 did no work), retries while the server answers 429; default 60 s. */
  busyBudgetMs?: number;
}

/**
 * Typed client of the model server (and, for sampling and adapter loading, of vLLM). Retries only calls
 * that are idempotent: reads, adapter loads, and train steps (a step is identified by adapter and number,
 * so a repeat returns the stored result).
 */
export class ModelServerClient {
  private readonly timeoutMs: number;
  private readonly attempts: number;
  private readonly chunkBytes: number;
  private readonly unreachableBudgetMs: number;
  private readonly busyBudgetMs: number;

  constructor(private readonly options: ModelServerOptions) {
    this.timeoutMs = options.timeoutMs ?? 600_000;
    this.attempts = options.attempts ?? 4;
    this.chunkBytes = options.chunkBytes ?? 32 << 20;
    this.unreachableBudgetMs = options.unreachableBudgetMs ?? 120_000;
    this.busyBudgetMs = options.busyBudgetMs ?? 60_000;
  }

  async models(): Promise<string[]> {
    const body = (await this.call('GET', '/v1/models', undefined, true)) as { data: { id: string }[] };
    return body.data.map((m) => m.id);
  }

  async chat(request: ChatRequest, timeoutMs?: number): Promise<ChatCompletion> {
    return this.parse(
      chatCompletionSchema,
      await this.call('POST', '/v1/chat/completions', request, false, timeoutMs),
    );
  }

  /**
   * One optimizer step over the request's sequences. A step larger than `chunkBytes` goes in chunks, staged on
   * the server under the request's digest, then trained as one step over all of them.
   */
  async trainStep(request: TrainStepRequest): Promise<TrainStepResult> {
    const chunks = chunkSequences(request.sequences, this.chunkBytes);
    const body =
      chunks.length <= 1
        ? await this.call('POST', '/train/step', request, true)
        : await this.trainStaged(request, chunks);
    return this.parse(trainStepResultSchema, body);
  }

  private async trainStaged(request: TrainStepRequest, chunks: TrainSequence[][]): Promise<unknown> {
    const upload = { id: requestDigest(request), chunks: chunks.length };
    for (let attempt = 1; ; attempt++) {
      for (const [index, sequences] of chunks.entries()) {
        const chunk = { adapter: request.adapter, step: request.step, upload, index, sequences };
        await this.call('POST', '/train/step/chunk', chunk, true);
      }
      try {
        return await this.call('POST', '/train/step', { ...stepSettings(request), upload }, true);
      } catch (err) {
        // The chunks went before the step trained (a concurrent attempt's step spent them): stage them again.
        const gone = err instanceof ModelServerError && err.status === 409 && /: upload: /.test(err.message);
        if (!gone || attempt >= this.attempts) throw err;
      }
    }
  }

  /** vLLM's /tokenize: a chat prompt's ids as the chat endpoint renders it, or raw text's (no special tokens added). */
  async tokenize(
    request:
      | { prompt: string }
      | {
          messages: ChatMessage[];
          tools?: unknown[];
          add_generation_prompt?: boolean;
          chat_template_kwargs?: Record<string, unknown>;
        },
  ): Promise<TokenizeResult> {
    return this.parse(tokenizeResultSchema, await this.call('POST', '/tokenize', request, true));
  }

  async trainProgress(adapter: string): Promise<TrainProgress> {
    return this.parse(
      trainProgressSchema,
      await this.call('GET', `/train/progress/${encodeURIComponent(adapter)}`, undefined, true),
    );
  }

  async cancelTraining(adapter: string): Promise<boolean> {
    return ((await this.call('POST', '/train/cancel', { adapter }, true)) as { cancelled: boolean })
      .cancelled;
  }

  /** vLLM's endpoint: makes the PEFT adapter at `path` available for sampling as `name`. */
  /** `inPlace`: a name the server holds already is loaded again from `path` (vLLM's load_inplace). */
  async loadAdapter(name: string, path: string, inPlace = false): Promise<void> {
    await this.call(
      'POST',
      '/v1/load_lora_adapter',
      { lora_name: name, lora_path: path, load_inplace: inPlace },
      true,
    );
  }

  async unloadAdapter(name: string): Promise<void> {
    await this.call('POST', '/v1/unload_lora_adapter', { lora_name: name }, true);
  }

  private parse<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
    const parsed = schema.safeParse(body);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new ModelServerError(
        `malformed reply from the model server at ${issue.path.join('.')}: ${issue.message}`,
        undefined,
        false,
      );
    }
    return parsed.data;
  }

  private async call(
    method: string,
    path: string,
    body: unknown,
    idempotent: boolean,
    timeoutMs = this.timeoutMs,
  ) {
    const attempts = idempotent ? this.attempts : 1;
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.once(method, path, body, timeoutMs);
      } catch (err) {
        const retryable = !(err instanceof ModelServerError) || err.retryable;
        if (!retryable) throw err;
        const backoff = Math.min(5000, 500 * 2 ** (attempt - 1));
        const elapsed = Date.now() - started;
        // Busy (429): nothing was done, so any call waits, as long as the server asks, within its budget.
        const busy = err instanceof ModelServerError && err.status === 429;
        // Unreachable (a restart): an idempotent call waits for the server to come back, within its budget.
        const down = idempotent && err instanceof ModelServerError && err.unreachable;
        const budget = busy ? this.busyBudgetMs : down ? this.unreachableBudgetMs : 0;
        if (attempt >= attempts && elapsed >= budget) throw err;
        const wait = (err instanceof ModelServerError && err.retryAfterMs) || backoff;
        if (attempt >= attempts && elapsed + wait > budget) throw err;
        await sleep(wait);
      }
    }
  }

  private async once(method: string, path: string, body: unknown, timeoutMs: number): Promise<unknown> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.options.token) headers.authorization = `Bearer ${this.options.token}`;
    let response: Response;
    try {
      response = await fetch(new URL(path, this.options.url), {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      throw new ModelServerError(
        `model server at ${this.options.url} unreachable: ${(err as Error).message}`,
        undefined,
        true,
        (err as Error).name !== 'TimeoutError', // a timeout reached the server: attempts bound it, not a wait
      );
    }
    const text = await response.text();
    if (!response.ok) {
      const message = safeJson(text)?.error?.message ?? text.slice(0, 300);
      const retryAfter = Number(response.headers.get('retry-after'));
      throw new ModelServerError(
        `${method} ${path} → ${response.status}: ${message}`,
        response.status,
        response.status >= 500 || response.status === 429,
        false,
        Number.isFinite(retryAfter) && retryAfter > 0 ? Math.min(retryAfter, 30) * 1000 : undefined,
      );
    }
    return safeJson(text) ?? text; // vLLM answers adapter loads in plain text
  }
}

function safeJson(text: string): ({ error?: { message?: string } } & Record<string, unknown>) | undefined {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
