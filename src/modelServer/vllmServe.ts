import type { RunSpec } from '../runSpec';

/**
 * The one source of a vLLM sampling host's command line and environment: the README's recipe, the example
 * spec's header, the deployment files and the vLLM double's tests all come from here (a test compares them).
 * Every flag is one a run depends on; each comment says what breaks without it (read in vLLM 0.33.0's source).
 */
export const VLLM_VERSION = '0.33.0';

/** The name every run asks for the base model by; vLLM serves it under its path unless told otherwise. */
export const BASE_MODEL_NAME = 'base';

/** Ranks vLLM's LoRA configuration accepts for --max-lora-rank (vllm/config/lora.py). */
const VLLM_LORA_RANKS = [1, 8, 16, 32, 64, 128, 256, 320, 512];

/** Adapters a sampler keeps on the GPU at once: a step's version and the one before it, for two runs. */
const MAX_LORAS = 4;

export interface SamplerHost {
  /** The base model's folder on the sampling host (the trainer's --model). */
  model: string;
  host: string;
  port: number;
}

export interface VllmServe {
  /** `vllm serve MODEL …` as argv. */
  argv: string[];
  /** The environment it needs, beside the API key (VLLM_API_KEY from the sampler token, never on the command line). */
  env: Record<string, string>;
}

/** The smallest rank vLLM accepts that holds the spec's LoRA rank. */
export function vllmLoraRank(rank: number): number {
  const fit = VLLM_LORA_RANKS.find((r) => r >= rank);
  if (fit === undefined) throw new Error(`lora.rank: ${rank} exceeds vLLM's largest LoRA rank (512)`);
  return fit;
}

export function vllmServe(spec: RunSpec, sampler: SamplerHost): VllmServe {
  return {
    argv: [
      'vllm',
      'serve',
      sampler.model,
      // Without it vLLM serves the model under its path, and every request for `base` is a 404.
      '--served-model-name',
      BASE_MODEL_NAME,
      // Without both, a request with tools is refused (400) and no reply carries tool_calls.
      '--enable-auto-tool-choice',
      '--tool-call-parser',
      'hermes',
      // Without it vLLM fills every sampling field a request leaves out from generation_config.json.
      '--generation-config',
      'vllm',
      // Each trained step is loaded at run time as a LoRA adapter of the spec's rank.
      '--enable-lora',
      '--max-lora-rank',
      String(vllmLoraRank(spec.lora.rank)),
      '--max-loras',
      String(MAX_LORAS),
      // An episode's whole context: the agent loop never asks for more.
      '--max-model-len',
      String(spec.sampling.contextTokens),
      '--host',
      sampler.host,
      '--port',
      String(sampler.port),
    ],
    // Without it vLLM registers neither /v1/load_lora_adapter nor /v1/unload_lora_adapter.
    env: { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' },
  };
}

/** The command as a shell line: `ENV=… vllm serve …`, the API key taken from the environment. */
export function vllmServeShell(serve: VllmServe, apiKeyVariable = 'EVALRL_MODEL_SERVER_TOKEN'): string {
  const env = Object.entries(serve.env).map(([k, v]) => `${k}=${v}`);
  return [...env, `VLLM_API_KEY="$${apiKeyVariable}"`, ...serve.argv].join(' ');
}
