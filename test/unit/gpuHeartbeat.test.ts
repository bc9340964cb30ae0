import { MockActivityEnvironment } from '@temporalio/testing';
import { createGpuActivities } from '../../src/activities/gpu';
import type { ModelServerClient } from '../../src/modelServer/client';
import type { Store } from '../../src/store';

/** Issue 47: while the model server restarts (the client waits for it), the train step keeps heartbeating. */
test('trainStep heartbeats while its first progress call waits for a restarting server', async () => {
  const turns = [{ promptTokenIds: [1, 2], tokenIds: [3, 4], logprobs: [-0.5, -0.5] }];
  const store = { episodes: { sampledTurns: async () => turns } } as unknown as Store;
  const progress = { adapter: 'policy', running: false, latest_step: 0 };
  let calls = 0;
  const server = {
    // The first call stands for the client waiting ~11 s for the server to come back; later ones answer.
    trainProgress: async () =>
      ++calls === 1 ? new Promise((resolve) => setTimeout(() => resolve(progress), 11_000)) : progress,
    trainStep: async () => ({ loss: 0.5 }),
  } as unknown as ModelServerClient;
  const env = new MockActivityEnvironment();
  const beats: number[] = [];
  const started = Date.now();
  env.on('heartbeat', () => beats.push(Date.now() - started));
  const { trainStep } = createGpuActivities(store, server, 'host');
  const input = {
    adapter: 'policy',
    step: 1,
    objective: 'grpo',
    advantages: [{ sample: { kind: 'episode', id: 'e1' }, advantage: 1 }],
    hyperparameters: { kl_coef: 0, learning_rate: 1e-5 },
    lora: { rank: 4, alpha: 8 },
  } as unknown as Parameters<typeof trainStep>[0];
  expect(await env.run(trainStep, input)).toEqual({ loss: 0.5 });
  // Beats at ~5 s and ~10 s while the wait lasted (a 10 s heartbeat timeout would otherwise have fired).
  expect(beats.filter((t) => t < 11_000).length).toBeGreaterThanOrEqual(2);
}, 20_000);
