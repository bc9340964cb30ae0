import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import type { Config } from '../../src/config';
import { createPool } from '../../src/db/pool';
import { startModelServer, stopModelServer } from '../../src/stack/modelServer';
import { stopManaged } from '../../src/stack/processes';
import { startTemporal, temporalProcess } from '../../src/stack/temporal';
import { TASK_QUEUES } from '../../src/contract';
import { WORKER_QUEUES } from '../../src/workers/start';
import type { RunStatus } from '../../src/contract';
import { trainingRun } from '../../src/workflows/trainingRun';
import { spawnWorker, stopWorker, tinyRunSpec, waitFor } from './runFixtures';
import { cli, stackConfig, startTinyModelServer, tempDataDir, TEST_STACK_ENV } from './testStack';

jest.setTimeout(900_000);

/**
 * Each run has its own model server (deterministic mode, tiny model) and one worker process per queue, as
 * in production. A fault is injected while the run is in flight; the run must complete with every step
 * trained once, every rollout stored once, and the same final adapters as an uninterrupted run.
 */
interface Fleet {
  runId: string;
  client: Client;
  handle: WorkflowHandle<typeof trainingRun>;
  env: Record<string, string>;
  /** The run's model server (its pid file lives in `dir`). */
  server: Config;
  dir: string;
  workers: Record<string, ChildProcess>;
  /** SIGKILLs the worker of a queue and starts a new one in its place. */
  killWorker(queue: string): Promise<void>;
}

const SEED = 23;
const pool = createPool(stackConfig());
let reference: Record<string, string>;

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
});
afterAll(() => pool.end());

async function runWithFault(
  tag: string,
  port: number,
  fault: (fleet: Fleet) => Promise<void>,
  temporalEnv: Record<string, string> = {},
) {
  const dir = tempDataDir(`evalrl-fault-${tag}-`);
  const server = await startTinyModelServer(dir, port);
  const env = {
    ...TEST_STACK_ENV,
    ...temporalEnv,
    EVALRL_MODEL_SERVER_URL: server.modelServer.url,
    EVALRL_GPU_HOST: `host-${tag}`,
  };
  const config = stackConfig(env);
  const workers = Object.fromEntries(WORKER_QUEUES.map((q) => [q, spawnWorker(q, env)]));
  const connection = await Connection.connect({ address: config.temporal.address });
  const client = new Client({ connection, namespace: config.temporal.namespace });
  const runId = `fault-${tag}-${Date.now()}`;
  const spec = {
    ...tinyRunSpec(tag, SEED),
    activities: { maximumAttempts: 20, heartbeatTimeoutSeconds: 10 },
  };
  try {
    const handle = await client.workflow.start(trainingRun, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: runId,
      args: [{ runId, spec }],
    });
    const fleet: Fleet = {
      runId,
      client,
      handle,
      env,
      server,
      dir,
      workers,
      async killWorker(queue) {
        await stopWorker(workers[queue], 'SIGKILL');
        workers[queue] = spawnWorker(queue, env);
      },
    };
    await fault(fleet);
    const result = await resultThroughOutages(handle);
    expect(result).toMatchObject({ state: 'done' });
    return await verify(runId, dir, tag);
  } finally {
    await Promise.all(Object.values(workers).map((w) => stopWorker(w)));
    await connection.close();
    await stopModelServer(server);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** The run's result; a restarting Temporal server makes the long poll fail for a while. */
async function resultThroughOutages(handle: WorkflowHandle<typeof trainingRun>): Promise<RunStatus> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await handle.result();
    } catch (err) {
      if (attempt > 30 || !/unavailable|connect|transport/i.test(String(err))) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/** Exactly once: checkpoints step-0..2 with no gap, one row per rollout key, as many as the steps asked for. */
async function verify(runId: string, dir: string, tag: string) {
  for (const adapter of [`rm-${tag}`, `policy-${tag}`])
    expect(fs.readdirSync(path.join(dir, 'checkpoints', adapter)).sort()).toEqual([
      'step-0',
      'step-1',
      'step-2',
    ]);
  const episodes = await pool.query(
    `SELECT count(*)::int AS n FROM trajectories WHERE run_id = $1 AND stage = 'policy'`,
    [runId],
  );
  expect(episodes.rows[0].n).toBe(2 * 2 * 2); // steps × tasks × group: nothing rolled out twice
  const judged = await pool.query(`SELECT count(*)::int AS n FROM judgements WHERE judge_key LIKE $1`, [
    `${runId}:rewardModel:%`,
  ]);
  expect(judged.rows[0].n).toBe(2 * 2 * 2);
  const published = await pool.query<{ stage: string; sha256: string }>(
    'SELECT stage, sha256 FROM published_adapters WHERE run_id = $1 AND step = 2',
    [runId],
  );
  return Object.fromEntries(published.rows.map((r) => [r.stage, r.sha256]));
}

/** Waits until a stage of the run has an activity of this type running (started, not finished). */
async function whileRunning(fleet: Fleet, stage: string, activity: string) {
  const stageHandle = fleet.client.workflow.getHandle(`${fleet.runId}/${stage}`);
  await waitFor(
    async () =>
      ((await stageHandle.describe()).raw.pendingActivities ?? []).some(
        (a) => a.activityType?.name === activity && Number(a.state) === 2, // PENDING_ACTIVITY_STATE_STARTED
      ),
    600_000,
    `${activity} in the ${stage} stage`,
  );
}

it('an uninterrupted run gives the reference adapters', async () => {
  reference = await runWithFault('ref', 18011, async () => {});
  expect(Object.keys(reference).sort()).toEqual(['policy', 'rewardModel']);
});

it('SIGKILL of the GPU worker during trainStep', async () => {
  const adapters = await runWithFault('gpu', 18012, async (fleet) => {
    await whileRunning(fleet, 'policy', 'trainStep');
    await fleet.killWorker('gpu');
  });
  expect(adapters).toEqual(reference);
});

it('SIGKILL of a rollout worker mid-episode', async () => {
  const adapters = await runWithFault('rollout', 18013, async (fleet) => {
    await whileRunning(fleet, 'policy', 'rolloutGroup');
    await fleet.killWorker('rollout');
  });
  expect(adapters).toEqual(reference);
});

it('SIGKILL of the model server during a step', async () => {
  const adapters = await runWithFault('server', 18014, async (fleet) => {
    await whileRunning(fleet, 'policy', 'rolloutGroup');
    await stopModelServer(fleet.server, 'SIGKILL');
    await startModelServer(fleet.server, {
      model: path.join(fleet.dir, 'tiny-model'),
      checkpoints: path.join(fleet.dir, 'checkpoints'),
      mode: 'deterministic',
    });
  });
  expect(adapters).toEqual(reference);
});

it('stop and restart of the Temporal dev server mid-run', async () => {
  const temporalDir = tempDataDir('evalrl-fault-temporal-');
  const temporalEnv = {
    EVALRL_DATA_DIR: temporalDir,
    EVALRL_TEMPORAL_PORT: '37233',
    EVALRL_TEMPORAL_UI_PORT: '38233',
  };
  const temporal = stackConfig({ ...TEST_STACK_ENV, ...temporalEnv });
  await startTemporal(temporal);
  try {
    const adapters = await runWithFault(
      'temporal',
      18015,
      async (fleet) => {
        await whileRunning(fleet, 'policy', 'rolloutGroup');
        await stopManaged(temporalProcess(temporal), 'SIGKILL');
        await new Promise((r) => setTimeout(r, 3000));
        await startTemporal(temporal);
      },
      { EVALRL_TEMPORAL_PORT: '37233', EVALRL_TEMPORAL_UI_PORT: '38233' },
    );
    expect(adapters).toEqual(reference);
  } finally {
    await stopManaged(temporalProcess(temporal));
    fs.rmSync(temporalDir, { recursive: true, force: true });
  }
});
