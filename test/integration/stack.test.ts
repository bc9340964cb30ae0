import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { Runtime } from '@temporalio/worker';
import { workerLogger } from '../../src/workers/logger';
import { MIGRATIONS } from '../../src/db/migrations';
import { createPool } from '../../src/db/pool';
import { TASK_QUEUES } from '../../src/contract';
import { createWorkers, runWorkersUntil } from '../../src/workers/start';
import { stackCheck } from '../../src/workflows';
import { clusterDir } from '../../src/stack/postgres';
import { cli, stackConfig, tempDataDir, TEST_STACK_ENV } from './testStack';

jest.setTimeout(240_000);
Runtime.install({ logger: workerLogger() });

// A stack of its own (own folder and ports), brought up from nothing and restarted inside the test.
const env = {
  ...TEST_STACK_ENV,
  EVALRL_DATA_DIR: tempDataDir('evalrl-stack-'),
  EVALRL_TEMPORAL_PORT: '27233',
  EVALRL_TEMPORAL_UI_PORT: '28233',
  EVALRL_PG_PORT: '25433',
};
const config = stackConfig(env);

afterAll(async () => {
  await cli(['down'], env);
  fs.rmSync(env.EVALRL_DATA_DIR, { recursive: true, force: true });
});

async function withClient<T>(use: (client: Client) => Promise<T>): Promise<T> {
  const connection = await Connection.connect({ address: config.temporal.address });
  try {
    return await use(new Client({ connection, namespace: config.temporal.namespace }));
  } finally {
    await connection.close();
  }
}

it('comes up from nothing, runs a workflow through PostgreSQL, and keeps its history across a restart', async () => {
  const first = await cli(['up', '--json'], env);
  expect(JSON.parse(first.stdout)).toMatchObject({
    temporal: 'started',
    postgres: 'started',
    migrationsApplied: MIGRATIONS.map((m) => `${m.version}_${m.name}`),
  });
  const again = await cli(['up', '--json'], env);
  expect(JSON.parse(again.stdout)).toMatchObject({
    temporal: 'reused',
    postgres: 'reused',
    migrationsApplied: [],
  });

  const upConfig = stackConfig(env); // read after `up`: the password it generated for the cluster
  const pool = createPool(upConfig);
  const workers = await createWorkers(upConfig, pool, ['workflows', 'cpu']);
  const workflowId = `stack-check-${Date.now()}`;
  const result = await runWorkersUntil(
    workers,
    withClient((client) =>
      client.workflow.execute(stackCheck, { taskQueue: TASK_QUEUES.workflows, workflowId, args: ['hello'] }),
    ),
  );
  expect(result).toEqual({ workflowId, stored: 'hello' });
  const stored = await pool.query('SELECT message FROM stack_checks WHERE workflow_id = $1', [workflowId]);
  expect(stored.rows).toEqual([{ message: 'hello' }]);
  await pool.end();

  // The activity ran on its own queue: its scheduled event names evalrl-cpu.
  const historyBefore = await withClient((client) => client.workflow.getHandle(workflowId).fetchHistory());
  const scheduled = historyBefore.events?.find((e) => e.activityTaskScheduledEventAttributes);
  expect(scheduled?.activityTaskScheduledEventAttributes?.taskQueue?.name).toBe(TASK_QUEUES.cpu);

  const stopped = await cli(['down', '--json'], env);
  expect(JSON.parse(stopped.stdout)).toEqual({
    temporal: 'stopped',
    postgres: 'stopped',
    modelServer: 'not running',
  });
  await expect(cli(['status'], env)).rejects.toMatchObject({ code: 1 });

  const restarted = await cli(['up', '--json'], env);
  expect(JSON.parse(restarted.stdout)).toMatchObject({ temporal: 'started', postgres: 'started' });
  const historyAfter = await withClient((client) => client.workflow.getHandle(workflowId).fetchHistory());
  expect(historyAfter.events?.length).toBe(historyBefore.events?.length);
  const description = await withClient((client) => client.workflow.getHandle(workflowId).describe());
  expect(description.status.name).toBe('COMPLETED');
  const status = JSON.parse((await cli(['status', '--json'], env)).stdout);
  expect(status).toMatchObject({
    temporal: { healthy: true, managed: true },
    postgres: { healthy: true, managed: true },
  });
});

it('registers the search attributes runs are listed by', async () => {
  const connection = await Connection.connect({ address: config.temporal.address });
  const { customAttributes } = await connection.operatorService.listSearchAttributes({
    namespace: config.temporal.namespace,
  });
  await connection.close();
  expect(Object.keys(customAttributes)).toEqual(
    expect.arrayContaining(['EvalrlRunId', 'EvalrlStage', 'EvalrlStep', 'EvalrlStatus']),
  );
});

it('refuses to start over a port taken by a server it did not start', async () => {
  const other = { ...env, EVALRL_DATA_DIR: tempDataDir('evalrl-other-') };
  await expect(cli(['up'], other)).rejects.toMatchObject({
    // Named: the holder's pid and command line, and that it is evalrl's own of another data folder.
    stderr: expect.stringMatching(/port (27233|25433) is taken by pid \d+ \(.+\).*evalrl's own service/s),
  });
  fs.rmSync(other.EVALRL_DATA_DIR, { recursive: true, force: true });
});

// Only root runs PostgreSQL as another user, who may be shut out of the folder the clone lives in.
(os.userInfo().uid === 0 ? it : it.skip)(
  'keeps PostgreSQL where its server user can reach it when the data folder is in a private one',
  async () => {
    const closed = tempDataDir('evalrl-private-');
    fs.chmodSync(closed, 0o700);
    const inside = {
      ...env,
      EVALRL_DATA_DIR: path.join(closed, 'data'),
      EVALRL_TEMPORAL_PORT: '47233',
      EVALRL_TEMPORAL_UI_PORT: '48233',
      EVALRL_PG_PORT: '45433',
    };
    const cluster = clusterDir(stackConfig(inside));
    try {
      const up = await cli(['up', '--json'], inside);
      expect(JSON.parse(up.stdout)).toMatchObject({ temporal: 'started', postgres: 'started' });
      expect(up.stderr).toContain(`PostgreSQL's data is in ${cluster}`);
      expect(cluster.startsWith(closed)).toBe(false);
      // The next command finds the same cluster and reuses its own servers.
      expect(JSON.parse((await cli(['up', '--json'], inside)).stdout)).toMatchObject({
        temporal: 'reused',
        postgres: 'reused',
      });
    } finally {
      await cli(['down'], inside);
      fs.rmSync(closed, { recursive: true, force: true });
      fs.rmSync(cluster, { recursive: true, force: true });
    }
  },
);

it('refuses a malformed variable before starting anything, naming it', async () => {
  await expect(cli(['up'], { ...env, EVALRL_PG_PORT: 'nope' })).rejects.toMatchObject({
    stderr: expect.stringMatching(/^evalrl: EVALRL_PG_PORT: /),
  });
});
