import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import type { Config } from '../../src/config';
import { ModelServerClient } from '../../src/modelServer/client';
import { publishStep } from '../../src/modelServer/publish';
import { createSamplerPool } from '../../src/modelServer/samplerPool';
import { startModelServer, stopModelServer } from '../../src/stack/modelServer';
import {
  stackConfig,
  startTinyModelServer,
  tempDataDir,
  TEST_STACK_ENV,
  tinyServerSettings,
} from './testStack';

jest.setTimeout(300_000);

// Two hosts: the trainer (A) and a sampler (B), two real model servers over one checkpoint folder.
const dirA = tempDataDir('evalrl-pool-a-');
const dirB = tempDataDir('evalrl-pool-b-');
let trainer: Config;
let sampler: Config;

beforeAll(async () => {
  trainer = await startTinyModelServer(dirA, 18021);
  sampler = stackConfig({
    ...TEST_STACK_ENV,
    EVALRL_DATA_DIR: dirB,
    EVALRL_MODEL_SERVER_URL: 'http://127.0.0.1:18022',
  });
  await startModelServer(sampler, tinyServerSettings(dirA)); // A's model and checkpoints
});
afterAll(async () => {
  await Promise.allSettled([stopModelServer(trainer), stopModelServer(sampler)]);
  for (const dir of [dirA, dirB]) fs.rmSync(dir, { recursive: true, force: true });
});

it('samples a published step on both hosts and goes on on the trainer when the sampler host dies', async () => {
  const a = new ModelServerClient({ url: trainer.modelServer.url, attempts: 2 });
  const b = new ModelServerClient({ url: sampler.modelServer.url, attempts: 2 });
  const trained = await a.trainStep({
    adapter: 'pooled',
    step: 1,
    sequences: [1, -1].map((advantage) => ({
      token_ids: [5, 6, 7, 8, 9, 10, 11, 12],
      mask: [0, 0, 0, 1, 1, 1, 1, 1] as (0 | 1)[],
      logprobs: [0, 0, 0, -1, -1, -1, -1, -1],
      advantage,
    })),
    hyperparameters: { learning_rate: 1e-2 },
    lora: { rank: 4, alpha: 8 },
  });
  const publication = await publishStep([trainer.modelServer.url, sampler.modelServer.url], undefined, {
    adapter: 'pooled',
    step: 1,
    checkpoint: trained.checkpoint,
  });
  expect(publication.failed).toEqual([]);
  expect(await b.models()).toContain('pooled@step-1'); // published on the sampler host
  expect(path.resolve(trained.checkpoint).startsWith(path.join(dirA, 'checkpoints'))).toBe(true);

  const pool = createSamplerPool([trainer.modelServer.url, sampler.modelServer.url]);
  const llm = new OpenAI({
    baseURL: `${trainer.modelServer.url}/v1`,
    apiKey: 'unused',
    maxRetries: 0,
    fetch: pool.fetch,
  });
  const ask = (seed: number) =>
    llm.chat.completions.create({
      model: 'pooled@step-1',
      messages: [{ role: 'user', content: `question ${seed}` }],
      max_tokens: 160,
      seed,
      ...{ ignore_eos: true }, // vLLM's extension (the model server's too): every request takes its full length
    });
  // The same seeded request gives the same sample on either host: both sample the same version.
  const alone = await Promise.all([ask(1), ask(1)]);
  expect(pool.servers.map((s) => s.served)).toEqual([1, 1]);
  expect(alone[0].choices[0].message.content).toBe(alone[1].choices[0].message.content);

  // Eight requests in flight; the sampler host is killed under them. Every request is answered.
  const inFlight = Array.from({ length: 8 }, (_, i) => ask(10 + i));
  await new Promise((resolve) => setTimeout(resolve, 300));
  await stopModelServer(sampler, 'SIGKILL');
  const answered = await Promise.all(inFlight);
  expect(answered.every((r) => r.choices.length === 1 && r.model === 'pooled@step-1')).toBe(true);
  expect(pool.servers[1].downUntil).toBeGreaterThan(Date.now()); // taken out
  expect(pool.servers[0].served).toBeGreaterThanOrEqual(5);
});
