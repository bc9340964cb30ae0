import fs from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import type { Config } from '../../src/config';
import { createPool } from '../../src/db/pool';
import { rewardWeightsSchema } from '../../src/reward/deterministic';
import { stopModelServer } from '../../src/stack/modelServer';
import { TASK_QUEUES } from '../../src/taskQueues';
import { createWorkers, runWorkersUntil } from '../../src/workers/start';
import { policyStage, type PolicyStageInput } from '../../src/workflows/policyStage';
import { policyStageStatus } from '../../src/workflows/policyStage';
import { cli, stackConfig, startTinyModelServer, tempDataDir, TEST_STACK_ENV } from './testStack';

jest.setTimeout(600_000);
Runtime.install({ logger: new DefaultLogger('WARN') });

const dir = tempDataDir('evalrl-policy-stage-');
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

it('runs GRPO steps of the policy stage on Temporal: every step trained once, trajectories stored once', async () => {
  const pool = createPool(config);
  const workers = await createWorkers(config, pool, ['workflows', 'cpu', 'rollout', 'gpu']);
  const connection = await Connection.connect({ address: config.temporal.address });
  const client = new Client({ connection, namespace: config.temporal.namespace });
  const runId = `policy-stage-${Date.now()}`;
  const input: PolicyStageInput = {
    runId,
    seed: 3,
    adapter: 'policy',
    steps: 2,
    startStep: 1,
    tasksPerStep: 2,
    groupSize: 2,
    agent: {
      model: 'policy@latest',
      maxTurns: 2,
      contextTokens: 2048,
      maxTokensPerTurn: 24,
      temperature: 1,
      topP: 1,
      timeoutMs: 120_000,
      demonstration: true,
    },
    weights: rewardWeightsSchema.parse({}),
    hyperparameters: { learning_rate: 1e-3, micro_batch: 4 },
    lora: { rank: 4, alpha: 8 },
    divideByStd: true,
    dynamicSampling: { enabled: false, minStd: 0.01 },
    continueAsNewEverySteps: 1, // exercise continue-as-new between the two steps
  };
  const run = async () => {
    // The adapter does not exist before step 1 trains it: sample step 1 from the base model.
    const handle = await client.workflow.start(policyStage, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: runId,
      args: [{ ...input, agent: { ...input.agent, model: 'base' } }],
    });
    const result = await handle.result();
    expect(await handle.query(policyStageStatus)).toMatchObject({ step: 2, phase: 'done' });
    return result;
  };
  const result = await runWorkersUntil(workers, run());
  await connection.close();
  expect(result).toMatchObject({ step: 2, totalSteps: 2, phase: 'done' });

  const steps = fs.readdirSync(path.join(dir, 'checkpoints', 'policy')).sort();
  expect(steps).toEqual(['step-0', 'step-1', 'step-2']); // no gap, no duplicate
  const metrics = await pool.query('SELECT step, metrics FROM step_metrics WHERE run_id = $1 ORDER BY step', [
    runId,
  ]);
  expect(metrics.rows.map((r) => r.step)).toEqual([1, 2]);
  expect(metrics.rows[1].metrics['optim/lr']).toBe(1e-3);
  const trajectories = await pool.query(
    'SELECT count(*)::int AS n, count(DISTINCT (step, task_id, sample))::int AS keys FROM trajectories WHERE run_id = $1',
    [runId],
  );
  expect(trajectories.rows[0]).toEqual({ n: 8, keys: 8 });
  await pool.end();
});
