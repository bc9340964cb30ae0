import fs from 'node:fs';
import path from 'node:path';
import { Runtime, Worker } from '@temporalio/worker';
import { workerLogger } from '../../src/workers/logger';
import type { Config } from '../../src/config';
import { rewardWeightsSchema } from '../../src/reward/deterministic';
import { ModelServerClient } from '../../src/modelServer/client';
import { startModelServer, stopModelServer } from '../../src/stack/modelServer';
import {
  cancelSignal,
  pauseSignal,
  resumeSignal,
  setHyperparametersUpdate,
  stageStatusQuery,
  TASK_QUEUES,
  type StageInput,
} from '../../src/contract';
import { hyperparametersSchema } from '../../src/hyperparameters';
import { grpoStage } from '../../src/workflows/grpoStage';
import { withWorkers } from './runFixtures';
import {
  cli,
  stackConfig,
  startTinyModelServer,
  tempDataDir,
  TEST_STACK_ENV,
  tinyServerSettings,
} from './testStack';

jest.setTimeout(600_000);
Runtime.install({ logger: workerLogger() });

const dir = tempDataDir('evalrl-grpo-stage-');
let config: Config;

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  const server = await startTinyModelServer(dir, 18004);
  config = stackConfig({ ...TEST_STACK_ENV, EVALRL_MODEL_SERVER_URL: server.modelServer.url });
});
afterAll(async () => {
  await stopModelServer(stackConfig({ ...TEST_STACK_ENV, EVALRL_DATA_DIR: dir }));
  fs.rmSync(dir, { recursive: true, force: true });
});

const agent = {
  maxTurns: 2,
  contextTokens: 2048,
  maxTokensPerTurn: 24,
  temperature: 1,
  topP: 1,
  timeoutMs: 120_000,
  demonstration: true,
  searchHits: 10,
  bodyChars: 4000,
};
const judgeSettings = {
  mode: 'skill' as const,
  reference: 'visible' as const,
  maxTurns: 2,
  contextTokens: 2048,
  maxTokensPerTurn: 24,
  temperature: 1,
  topP: 1,
  retries: 0,
  timeoutMs: 120_000,
};

/** The policy stage on its own, scored by the deterministic layer (judge weight 0; the run tests cover the judge). */
const baseInput = (runId: string, adapter: string, steps: number): StageInput => ({
  runId,
  stage: 'policy',
  seed: 3,
  adapter,
  startModel: 'base',
  steps,
  startStep: 1,
  tasksPerStep: 2,
  groupSize: 2,
  env: {
    kind: 'policy',
    agent,
    weights: rewardWeightsSchema.parse({}),
    reward: 'gold',
    judge: { model: 'base', weight: 0, settings: judgeSettings },
  },
  objective: 'grpo',
  hyperparameters: hyperparametersSchema.parse({ learning_rate: 1e-3 }),
  lora: { rank: 4, alpha: 8 },
  keepCheckpoints: 0,
  divideByStd: true,
  dynamicSampling: { enabled: false, minStd: 0.01, maxTopUps: 0 },
  evaluation: { kind: 'policy', everySteps: 100, split: 'test', count: 2 },
  activities: { maximumAttempts: 3, heartbeatTimeoutSeconds: 30 },
  continueAsNewEverySteps: 1,
});

async function waitFor(check: () => Promise<boolean>, ms = 120_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 200));
  }
}

const checkpointSteps = (adapter: string) => fs.readdirSync(path.join(dir, 'checkpoints', adapter)).sort();

it('pause stops new steps, setHyperparameters applies from the next step, resume continues', async () => {
  await withWorkers(config, async (client, pool) => {
    const runId = `grpo-stage-pause-${Date.now()}`;
    const handle = await client.workflow.start(grpoStage, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: runId,
      args: [baseInput(runId, 'paused', 3)],
    });
    await waitFor(async () => (await handle.query(stageStatusQuery)).step >= 1);
    await handle.signal(pauseSignal);
    await waitFor(async () => (await handle.query(stageStatusQuery)).phase === 'paused');
    const pausedAt = (await handle.query(stageStatusQuery)).step;
    await new Promise((r) => setTimeout(r, 4000));
    expect(await handle.query(stageStatusQuery)).toMatchObject({
      step: pausedAt,
      phase: 'paused',
      paused: true,
    });
    await expect(
      handle.executeUpdate(setHyperparametersUpdate, { args: [{ learning_rate: -1 }] }),
    ).rejects.toMatchObject({ cause: { message: expect.stringMatching(/learning_rate: Too small/) } });
    await expect(
      handle.executeUpdate(setHyperparametersUpdate, { args: [{ clip_high: 20 } as never] }),
    ).rejects.toMatchObject({ cause: { message: expect.stringMatching(/clip_high: Too big/) } });
    const updated = await handle.executeUpdate(setHyperparametersUpdate, { args: [{ learning_rate: 2e-3 }] });
    expect(updated).toEqual(hyperparametersSchema.parse({ learning_rate: 2e-3 }));
    await handle.signal(resumeSignal);
    expect(await handle.result()).toMatchObject({ step: 3, phase: 'done' });
    const { rows } = await pool.query(
      'SELECT step, metrics FROM step_metrics WHERE run_id = $1 ORDER BY step',
      [runId],
    );
    expect(rows.map((r) => [r.step, r.metrics['optim/lr']])).toEqual(
      rows.map((r) => [r.step, r.step <= pausedAt ? 1e-3 : 2e-3]),
    );
    expect(checkpointSteps('paused')).toEqual(['step-0', 'step-1', 'step-2', 'step-3']);
  });
});

it('cancel ends the stage after the step in flight is checkpointed', async () => {
  await withWorkers(config, async (client) => {
    const runId = `grpo-stage-cancel-${Date.now()}`;
    const handle = await client.workflow.start(grpoStage, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: runId,
      args: [baseInput(runId, 'cancelled', 6)],
    });
    await waitFor(async () => (await handle.query(stageStatusQuery)).step >= 1);
    await handle.signal(cancelSignal);
    const result = await handle.result();
    expect(result.phase).toBe('cancelled');
    expect(result.step).toBeLessThan(6);
    expect(checkpointSteps('cancelled')).toEqual(
      Array.from({ length: result.step + 1 }, (_, i) => `step-${i}`),
    );
  });
});

it('runs GRPO steps of the policy stage on Temporal: every step trained once, trajectories stored once', async () => {
  const runId = `grpo-stage-${Date.now()}`;
  await withWorkers(config, async (client, pool) => {
    // continueAsNewEverySteps = 1 in baseInput: the two steps run in two workflow runs.
    const handle = await client.workflow.start(grpoStage, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: runId,
      args: [baseInput(runId, 'policy', 2)],
    });
    expect(await handle.result()).toMatchObject({ step: 2, totalSteps: 2, phase: 'done' });
    expect(await handle.query(stageStatusQuery)).toMatchObject({ step: 2, phase: 'done' });
    // Replay the recorded history against the current workflow code: any non-determinism throws.
    await Worker.runReplayHistory(
      { workflowsPath: require.resolve('../../src/workflows') },
      await handle.fetchHistory(),
      runId,
    );

    expect(checkpointSteps('policy')).toEqual(['step-0', 'step-1', 'step-2']); // no gap, no duplicate
    // Listed by its search attributes (visibility is eventually consistent: poll briefly).
    const listed = async () => {
      const found = [];
      for await (const w of client.workflow.list({
        query: `EvalrlRunId = '${runId}' AND EvalrlStatus = 'done' AND EvalrlStep = 2`,
      }))
        found.push(w);
      return found.length > 0;
    };
    await waitFor(listed, 20_000);
    const metrics = await pool.query(
      'SELECT step, metrics FROM step_metrics WHERE run_id = $1 ORDER BY step',
      [runId],
    );
    expect(metrics.rows.map((r) => r.step)).toEqual([1, 2]);
    expect(metrics.rows[1].metrics['optim/lr']).toBe(1e-3);
    const trajectories = await pool.query(
      "SELECT count(*)::int AS n, count(DISTINCT (step, task_id, sample))::int AS keys FROM trajectories WHERE run_id = $1 AND stage = 'policy'",
      [runId],
    );
    expect(trajectories.rows[0]).toEqual({ n: 8, keys: 8 });
  });
});

it('samples through a pool of two hosts, publishing every step, and goes on when the sampler host dies mid-stage', async () => {
  const samplerDir = tempDataDir('evalrl-grpo-sampler-');
  const sampler = stackConfig({
    ...TEST_STACK_ENV,
    EVALRL_DATA_DIR: samplerDir,
    EVALRL_MODEL_SERVER_URL: 'http://127.0.0.1:18024',
  });
  await startModelServer(sampler, tinyServerSettings(dir)); // the trainer's model and checkpoint folder
  const pooled = stackConfig({
    ...TEST_STACK_ENV,
    EVALRL_MODEL_SERVER_URL: config.modelServer.url,
    EVALRL_SAMPLING_SERVERS: `${config.modelServer.url},${sampler.modelServer.url}`,
  });
  const samplerClient = new ModelServerClient({ url: sampler.modelServer.url, attempts: 1 });
  const runId = `grpo-stage-pool-${Date.now()}`;
  try {
    await withWorkers(pooled, async (client, pool) => {
      const handle = await client.workflow.start(grpoStage, {
        taskQueue: TASK_QUEUES.workflows,
        workflowId: runId,
        args: [baseInput(runId, 'pooled', 3)],
      });
      // Step 1 is published to the sampler host, which samples step 2 from it until it is killed.
      await waitFor(async () => (await samplerClient.models()).includes('pooled@step-1'));
      const health = async () =>
        (await (await fetch(`${sampler.modelServer.url}/usage`)).json()) as {
          sampling: { decoded_tokens: number };
        };
      const before = (await health()).sampling.decoded_tokens;
      await waitFor(async () => (await health()).sampling.decoded_tokens > before);
      await stopModelServer(sampler, 'SIGKILL');
      expect(await handle.result()).toMatchObject({ step: 3, phase: 'done' });
      expect(checkpointSteps('pooled')).toEqual(['step-0', 'step-1', 'step-2', 'step-3']);
      // Every turn says which version sampled it: step N samples what step N-1 trained.
      const { rows } = await pool.query(
        `SELECT step, array_agg(DISTINCT turns->0->>'model') AS models, count(*)::int AS n
         FROM trajectories WHERE run_id = $1 AND stage = 'policy' GROUP BY step ORDER BY step`,
        [runId],
      );
      expect(rows).toEqual([
        { step: 1, models: ['base'], n: 4 },
        { step: 2, models: ['pooled@step-1'], n: 4 },
        { step: 3, models: ['pooled@step-2'], n: 4 },
      ]);
    });
  } finally {
    await stopModelServer(sampler).catch(() => undefined);
    fs.rmSync(samplerDir, { recursive: true, force: true });
  }
});
