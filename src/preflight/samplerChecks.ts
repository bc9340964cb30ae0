/**
 * What a sampling host must do for a run, checked over the wire before the run starts: each failure names the
 * `vllm serve` flag (src/modelServer/vllmServe.ts) or the deployment step that fixes it. The same checks pass on
 * an evalrl model server, which samples as vLLM started with those flags does.
 */
import { z } from 'zod';
import { UNTRUNCATED } from '../env/agentLoop';
import { BASE_MODEL_NAME } from '../modelServer/vllmServe';

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
  /** What to change, when it failed. */
  fix?: string;
}

export interface SamplerTarget {
  url: string;
  token?: string;
  /** A probe adapter on the checkpoint folder the trainer writes to (its path as the trainer sees it). */
  probe?: string;
  /** The run's context window: the sampler must hold it. */
  contextTokens?: number;
}

const modelsSchema = z.object({
  data: z.array(z.object({ id: z.string(), max_model_len: z.number().int().optional() })),
});
const completionSchema = z.object({
  prompt_token_ids: z.array(z.number().int()).nullish(),
  choices: z
    .array(
      z.object({
        token_ids: z.array(z.number().int()).nullish(),
        logprobs: z.object({ content: z.array(z.object({ logprob: z.number() })).nullish() }).nullish(),
      }),
    )
    .min(1),
});

const PING_TOOL = {
  type: 'function',
  function: {
    name: 'ping',
    description: 'Answers pong.',
    parameters: { type: 'object', properties: {}, required: [] },
  },
};
const PROMPT = [{ role: 'user', content: 'Write a short list of unusual words.' }];

interface Reply {
  status: number;
  text: string;
  json: unknown;
}

async function call(target: SamplerTarget, path: string, body?: unknown): Promise<Reply> {
  const response = await fetch(new URL(path, target.url), {
    method: body === undefined ? 'GET' : 'POST',
    headers: {
      'content-type': 'application/json',
      ...(target.token ? { authorization: `Bearer ${target.token}` } : {}),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(120_000),
  });
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined; // vLLM answers adapter loads in plain text
  }
  return { status: response.status, text, json };
}

type Outcome = Omit<Check, 'name'>;
const pass = (detail: string): Outcome => ({ ok: true, detail });
const failed = (detail: string, fix: string): Outcome => ({ ok: false, detail, fix });
const excerpt = (r: Reply) => `${r.status} ${r.text.slice(0, 200)}`;

/** The base model under the name runs ask for, with the run's context. */
async function servesBase(target: SamplerTarget): Promise<Outcome> {
  const reply = await call(target, '/v1/models');
  const models = modelsSchema.safeParse(reply.json);
  if (!models.success) return failed(`/v1/models → ${excerpt(reply)}`, 'check the URL and the token');
  const base = models.data.data.find((m) => m.id === BASE_MODEL_NAME);
  if (!base)
    return failed(
      `it serves ${models.data.data.map((m) => m.id).join(', ')}`,
      `start vLLM with --served-model-name ${BASE_MODEL_NAME}`,
    );
  if (target.contextTokens && base.max_model_len && base.max_model_len < target.contextTokens)
    return failed(
      `its context is ${base.max_model_len} tokens; the run's episodes need ${target.contextTokens}`,
      `start vLLM with --max-model-len ${target.contextTokens}`,
    );
  return pass(`max_model_len ${base.max_model_len ?? 'unknown'}`);
}

/** A request with tools, as every rollout sends: refused without vLLM's tool-call parser. */
async function parsesToolCalls(target: SamplerTarget): Promise<Outcome> {
  const reply = await call(target, '/v1/chat/completions', {
    model: BASE_MODEL_NAME,
    messages: PROMPT,
    tools: [PING_TOOL],
    max_tokens: 1,
  });
  if (reply.status === 200) return pass('a request with tools was answered');
  return failed(
    excerpt(reply),
    /tool.choice|tool-call-parser/i.test(reply.text)
      ? 'start vLLM with --enable-auto-tool-choice --tool-call-parser hermes'
      : 'the sampler refused a request with tools',
  );
}

/** Training needs the prompt's and the sample's token ids and one logprob per sampled token. */
async function returnsTokens(target: SamplerTarget): Promise<Outcome> {
  const reply = await call(target, '/v1/chat/completions', {
    model: BASE_MODEL_NAME,
    messages: PROMPT,
    max_tokens: 4,
    logprobs: true,
    return_token_ids: true,
  });
  const parsed = completionSchema.safeParse(reply.json);
  const choice = parsed.success ? parsed.data.choices[0] : undefined;
  const ids = choice?.token_ids;
  const logprobs = choice?.logprobs?.content;
  if (
    parsed.success &&
    parsed.data.prompt_token_ids?.length &&
    ids?.length &&
    logprobs?.length === ids.length
  )
    return pass(`${ids.length} sampled tokens, each with its logprob`);
  return failed(
    reply.status === 200
      ? 'the reply has no prompt_token_ids, token_ids or logprobs.content'
      : excerpt(reply),
    'run vLLM 0.10.2 or later (return_token_ids), as pinned in src/modelServer/vllmServe.ts',
  );
}

/**
 * The sampler fills no field a request leaves out: a seeded request without the sampling fields samples what
 * the same request with vLLM's neutral values does. vLLM's default (--generation-config auto) would take them
 * from the model's generation_config.json (Qwen3: temperature 0.6, top_k 20, top_p 0.95).
 */
async function samplesAsRequested(target: SamplerTarget): Promise<Outcome> {
  const request = {
    model: BASE_MODEL_NAME,
    messages: PROMPT,
    max_tokens: 24,
    seed: 7,
    return_token_ids: true,
  };
  const explicit = { ...request, temperature: 1, top_p: 1, ...UNTRUNCATED };
  const sample = async (body: object) => {
    const reply = await call(target, '/v1/chat/completions', body);
    const parsed = completionSchema.safeParse(reply.json);
    if (!parsed.success) throw new Error(excerpt(reply));
    return JSON.stringify(parsed.data.choices[0].token_ids);
  };
  const [first, again, leftOut] = [await sample(explicit), await sample(explicit), await sample(request)];
  if (first !== again)
    return pass('not checked: the same seeded request gave two samples (not reproducible here)');
  if (leftOut === first) return pass('no sampling field is filled from the model');
  return failed(
    'a request that leaves the sampling fields out samples differently: they are filled from generation_config.json',
    'start vLLM with --generation-config vllm',
  );
}

/** A trained step is published by loading its PEFT folder from the shared checkpoint folder at run time. */
async function loadsAdapters(target: SamplerTarget): Promise<Outcome> {
  if (!target.probe) return failed('no probe adapter: the trainer did not answer', 'start the trainer first');
  const lora = `evalrl-preflight-${Math.random().toString(36).slice(2, 10)}`;
  const loaded = await call(target, '/v1/load_lora_adapter', { lora_name: lora, lora_path: target.probe });
  if (loaded.status === 404 && /"detail"/.test(loaded.text))
    return failed(
      '/v1/load_lora_adapter does not exist',
      'start vLLM with --enable-lora and the environment VLLM_ALLOW_RUNTIME_LORA_UPDATING=True',
    );
  if (loaded.status !== 200) {
    const rank = /max_lora_rank/i.test(loaded.text);
    return failed(
      excerpt(loaded),
      rank
        ? "start vLLM with --max-lora-rank of at least the spec's lora.rank (see `evalrl sampler-command`)"
        : `mount the trainer's checkpoint folder on the sampler at the same path (${target.probe} must be readable there)`,
    );
  }
  try {
    const sampled = await call(target, '/v1/chat/completions', {
      model: lora,
      messages: PROMPT,
      max_tokens: 1,
    });
    if (sampled.status !== 200)
      return failed(`sampling the loaded adapter: ${excerpt(sampled)}`, 'see the sampler log');
  } finally {
    await call(target, '/v1/unload_lora_adapter', { lora_name: lora });
  }
  return pass('a probe adapter was loaded, sampled and unloaded');
}

const SAMPLER_CHECKS: [string, (target: SamplerTarget) => Promise<Outcome>][] = [
  ['serves the base model as "base"', servesBase],
  ['accepts tools (tool-call parser on)', parsesToolCalls],
  ['returns token ids and logprobs', returnsTokens],
  ['samples as requested', samplesAsRequested],
  ['loads adapters from the shared checkpoint folder at run time', loadsAdapters],
];

export async function checkSampler(target: SamplerTarget): Promise<Check[]> {
  const results: Check[] = [];
  for (const [name, check] of SAMPLER_CHECKS) {
    const outcome = await check(target).catch((err: Error) =>
      failed(`no answer: ${err.message}`, `check that ${target.url} is up and takes the token`),
    );
    results.push({ name: `sampler ${target.url}: ${name}`, ...outcome });
    if (check === servesBase && !outcome.ok) break; // every later check asks for the base model
  }
  return results;
}
