import fs from 'node:fs';
import path from 'node:path';
import { ModelServerClient, ModelServerError } from '../../src/modelServer/client';
import type { Config } from '../../src/config';
import { stopModelServer } from '../../src/stack/modelServer';
import { startTinyModelServer, tempDataDir } from './testStack';

jest.setTimeout(300_000);

const dir = tempDataDir('evalrl-model-server-');
let config: Config;
let client: ModelServerClient;
const sequence = (advantage: number) => ({
  token_ids: [5, 6, 7, 8, 9, 10, 11, 12],
  mask: [0, 0, 0, 1, 1, 1, 1, 1] as (0 | 1)[],
  logprobs: [0, 0, 0, -1, -1, -1, -1, -1],
  advantage,
});

beforeAll(async () => {
  config = await startTinyModelServer(dir, 18001);
  client = new ModelServerClient({ url: config.modelServer.url, attempts: 2 });
});
afterAll(async () => {
  await stopModelServer(config);
  fs.rmSync(dir, { recursive: true, force: true });
});

it('samples with token ids and logprobs through the typed client', async () => {
  expect(await client.models()).toEqual(['base']);
  const completion = await client.chat({
    model: 'base',
    messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 6,
    seed: 1,
    ignore_eos: true,
  });
  expect(completion.choices[0].token_ids).toHaveLength(6);
  expect(completion.choices[0].token_logprobs).toHaveLength(6);
  const again = await client.chat({
    model: 'base',
    messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 6,
    seed: 1,
    ignore_eos: true,
  });
  expect(again.choices[0].token_ids).toEqual(completion.choices[0].token_ids);
});

it('trains a step exactly once, publishes it, and reports progress', async () => {
  const request = {
    adapter: 'policy',
    step: 1,
    sequences: [sequence(1), sequence(-1)],
    hyperparameters: { learning_rate: 1e-3 },
    lora: { rank: 4, alpha: 8 },
  };
  const first = await client.trainStep(request);
  expect(first).toMatchObject({ adapter: 'policy', step: 1, cached: false, learning_rate: 1e-3 });
  expect(await client.trainStep(request)).toMatchObject({ cached: true, loss: first.loss });
  expect(await client.trainProgress('policy')).toMatchObject({ running: false, latest_step: 1 });
  const checkpoint = path.join(dir, 'checkpoints', 'policy', 'step-1', 'adapter', 'policy');
  await client.loadAdapter('policy-published', checkpoint);
  expect(await client.models()).toEqual(['base', 'policy', 'policy-published', 'policy@step-1']);
  const sample = await client.chat({
    model: 'policy-published',
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 3,
  });
  expect(sample.choices).toHaveLength(1);
});

it('turns a bad request into a non-retryable error naming the field', async () => {
  const bad = client.trainStep({ adapter: 'policy', step: 5, sequences: [sequence(1)], hyperparameters: {} });
  await expect(bad).rejects.toMatchObject({
    status: 409,
    retryable: false,
    message: expect.stringMatching(/step: 5/),
  });
  const unknown = client.chat({ model: 'nope', messages: [{ role: 'user', content: 'x' }] });
  await expect(unknown).rejects.toBeInstanceOf(ModelServerError);
  await expect(unknown).rejects.toMatchObject({ status: 404, retryable: false });
});

it('reports an unreachable server as retryable', async () => {
  const down = new ModelServerClient({ url: 'http://127.0.0.1:1', attempts: 1 });
  await expect(down.models()).rejects.toMatchObject({
    retryable: true,
    message: expect.stringMatching(/unreachable/),
  });
});
