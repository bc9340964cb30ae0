import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import type { Config } from '../../src/config';
import { createPool } from '../../src/db/pool';
import { createHash } from 'node:crypto';
import { stageStatusQuery, TASK_QUEUES, type RunStatus, type StageName } from '../../src/contract';
import { stageAdapter } from '../../src/grpo/stage';
import { parseRunSpec, type RunSpec } from '../../src/runSpec';
import { startModelServer, stopModelServer } from '../../src/stack/modelServer';
import { stopPostgres } from '../../src/stack/postgres';
import { stopManaged } from '../../src/stack/processes';
import { startTemporal, temporalProcess } from '../../src/stack/temporal';
import { WORKER_QUEUES } from '../../src/workers/start';
import { trainingRun } from '../../src/workflows/trainingRun';
import { spawnWorker, stopWorker, tinyRunSpec, waitFor } from './runFixtures';
import {
  cli,
  stackConfig,
  startTinyModelServer,
  tempDataDir,
  TEST_STACK_ENV,
  tinyServerSettings,
} from './testStack';

jest.setTimeout(1_200_000);

/**
 * Each run has its own model server (deterministic mode, tiny model) and one worker process per queue, as
 * in production, and every stage: two warm starts, then GRPO for the reward model and the policy. Warm
 * starts make the tiny model's samples differ, so the GRPO stages have rewards that vary and adapters that
 * move. A fault is injected while the run is in flight; the run must complete with every step trained once,
 * every rollout stored once, and final adapters that moved from their start and equal an uninterrupted run's.
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
/** Steps of the judge's warm start every run shares (trained once), and of each run's own short warm starts. */
const SHARED_WARM_STEPS = 60;
const OWN_WARM_STEPS = 2;
const RM_GROUP = 4;
const pool = createPool(stackConfig());
let reference: Record<string, string>;
/** The folder holding the shared judge warm start's last checkpoint, where every run's reward model starts. */
let sharedCheckpoints: string;
/** Adapter names are claimed for good, so each session's runs name theirs afresh. */
const SESSION = Date.now().toString(36);
/** The warm-start adapter the runs share, as the run that trains it names it. */
const SHARED_JUDGE = `rm-shared-${SESSION}-warm`;

/**
 * A run whose reward model starts from a judge that learnt the procedure from a few demonstrations: the tiny
 * model then runs the verifiers on some samples and not on others, and on a few gives a verdict, so the
 * reward-model stage's rewards (a failed judgement that used the tools beats one that made no valid call)
 * vary and its adapter moves. The tiny policy never learns to call tools on unseen questions (its rewards stay
 * flat), so the policy stage proves exactly-once by its checkpoints and rows, not by its weights. The run's
 * own warm starts are short: they are here to be interrupted.
 */
function faultSpec(tag: string): RunSpec {
  const base = tinyRunSpec(`${tag}-${SESSION}`, SEED);
  const warm = (epochs: number) => ({
    enabled: true,
    demonstrations: 4,
    epochs,
    tasksPerStep: 4,
    hyperparameters: { learning_rate: 1e-2 },
  });
  return parseRunSpec({
    ...base,
    models: {
      ...base.models,
      rewardModel: { ...base.models.rewardModel, initFrom: `${SHARED_JUDGE}@step-${SHARED_WARM_STEPS}` },
    },
    lora: { rank: 32, alpha: 32 },
    sampling: {
      ...base.sampling,
      temperature: 0.7,
      maxTurns: 3,
      maxTokensPerTurn: 96,
      searchHits: 2,
      bodyChars: 300,
    },
    judge: { ...base.judge, temperature: 0.7, maxTurns: 3, maxTokensPerTurn: 160 },
    stages: {
      ...base.stages,
      policyWarmStart: warm(OWN_WARM_STEPS),
      judgeWarmStart: warm(OWN_WARM_STEPS),
      // Four judgements a candidate: the tiny judge finishes some and not others, so groups vary.
      rewardModel: { ...base.stages.rewardModel, groupSize: RM_GROUP },
    },
    activities: { maximumAttempts: 20, heartbeatTimeoutSeconds: 10 },
  });
}

/** The judge's warm start only, long enough for the tiny model to pick up the format; trained once. */
function sharedWarmSpec(): RunSpec {
  const spec = faultSpec('shared');
  return parseRunSpec({
    ...spec,
    models: {
      policy: { adapter: `policy-shared-${SESSION}` },
      rewardModel: { adapter: `rm-shared-${SESSION}` },
    },
    stages: {
      policyWarmStart: { ...spec.stages.policyWarmStart, enabled: false },
      judgeWarmStart: { ...spec.stages.judgeWarmStart, epochs: SHARED_WARM_STEPS },
      rewardModel: { ...spec.stages.rewardModel, enabled: false },
      policy: { ...spec.stages.policy, enabled: false },
    },
  });
}

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  sharedCheckpoints = tempDataDir('evalrl-fault-shared-');
  await runFleet(
    'shared',
    18010,
    sharedWarmSpec(),
    async () => {},
    {},
    (dir) => {
      fs.cpSync(
        path.join(dir, 'checkpoints', SHARED_JUDGE, `step-${SHARED_WARM_STEPS}`),
        path.join(sharedCheckpoints, SHARED_JUDGE, `step-${SHARED_WARM_STEPS}`),
        { recursive: true },
      );
    },
  );
}, 1_200_000);
afterAll(async () => {
  await pool.end();
  fs.rmSync(sharedCheckpoints, { recursive: true, force: true });
});

async function runWithFault(
  tag: string,
  port: number,
  fault: (fleet: Fleet) => Promise<void>,
  temporalEnv: Record<string, string> = {},
) {
  const spec = faultSpec(tag);
  return runFleet(tag, port, spec, fault, temporalEnv, (dir, runId) => verify(runId, dir, spec));
}

/**
 * Runs `spec` to the end on its own model server and workers, with the shared warm starts in its checkpoint
 * folder, while `fault` strikes; `check` reads the run's results before its folder is removed.
 */
async function runFleet<T>(
  tag: string,
  port: number,
  spec: RunSpec,
  fault: (fleet: Fleet) => Promise<void>,
  temporalEnv: Record<string, string>,
  check: (dir: string, runId: string) => Promise<T> | T,
): Promise<T> {
  const dir = tempDataDir(`evalrl-fault-${tag}-`);
  if (tag !== 'shared') fs.cpSync(sharedCheckpoints, path.join(dir, 'checkpoints'), { recursive: true });
  const server = await startTinyModelServer(dir, port, { initRange: 0.5 });
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
    return await check(dir, runId);
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

/** The SHA-256 of an adapter's weights at a checkpoint, as the model server computes it. */
function checkpointSha(dir: string, adapter: string, step: number): string {
  const folder = path.join(dir, 'checkpoints', adapter, `step-${step}`, 'adapter', adapter);
  const digest = createHash('sha256');
  for (const f of fs
    .readdirSync(folder)
    .filter((f) => f.endsWith('.safetensors'))
    .sort())
    digest.update(fs.readFileSync(path.join(folder, f)));
  return digest.digest('hex');
}

/**
 * Exactly once: every stage's checkpoints with no gap, one row per rollout key, as many as the steps asked
 * for; and every adapter but the policy's moved (see faultSpec). Returns the final adapters' hashes.
 */
async function verify(runId: string, dir: string, spec: RunSpec) {
  const stages: [StageName, number][] = [
    ['policyWarmStart', OWN_WARM_STEPS],
    ['judgeWarmStart', OWN_WARM_STEPS],
    ['rewardModel', 2],
    ['policy', 2],
  ];
  const final: Record<string, string> = {};
  for (const [stage, steps] of stages) {
    const adapter = stageAdapter(spec, stage);
    expect(fs.readdirSync(path.join(dir, 'checkpoints', adapter)).sort()).toEqual(
      Array.from({ length: steps + 1 }, (_, i) => `step-${i}`).sort(),
    );
    final[stage] = checkpointSha(dir, adapter, steps);
    if (stage !== 'policy')
      expect(`${stage} ${final[stage]}`).not.toBe(`${stage} ${checkpointSha(dir, adapter, 0)}`); // it left its start
  }
  const episodes = await pool.query(
    `SELECT count(*)::int AS n FROM trajectories WHERE run_id = $1 AND stage = 'policy'`,
    [runId],
  );
  expect(episodes.rows[0].n).toBe(2 * 2 * 2); // steps × tasks × group: nothing rolled out twice
  const judged = await pool.query(`SELECT count(*)::int AS n FROM judgements WHERE judge_key LIKE $1`, [
    `${runId}:rewardModel:%`,
  ]);
  expect(judged.rows[0].n).toBe(2 * 2 * RM_GROUP);
  // The reward-model stage had a learning signal: some group's rewards varied.
  const signal = await pool.query(
    `SELECT min((metrics->>'groups/zero_variance')::float) AS flat
     FROM step_metrics WHERE run_id = $1 AND stage = 'rewardModel'`,
    [runId],
  );
  expect(signal.rows[0].flat).toBeLessThan(1);
  return final;
}

/** Waits until a stage has finished at least one step. */
async function afterStep(fleet: Fleet, stage: StageName, step = 1) {
  const handle = fleet.client.workflow.getHandle(`${fleet.runId}/${stage}`);
  await waitFor(
    async () => (await handle.query(stageStatusQuery)).step >= step,
    600_000,
    `${stage} step ${step}`,
  );
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

it('an uninterrupted run gives the reference adapters, all of which moved', async () => {
  reference = await runWithFault('ref', 18011, async () => {});
  expect(Object.keys(reference).sort()).toEqual([
    'judgeWarmStart',
    'policy',
    'policyWarmStart',
    'rewardModel',
  ]);
});

// Faults are grouped two runs deep (each run trains four stages, which is what costs time): the stages run in
// order (warm starts, reward model, policy), so each wait below starts after the previous fault has struck.
it('SIGKILL of every kind of worker: GPU, rollout, judge, workflows and cpu, in every stage', async () => {
  const adapters = await runWithFault('workers', 18012, async (fleet) => {
    await afterStep(fleet, 'policyWarmStart', 1);
    await fleet.killWorker('gpu');
    await afterStep(fleet, 'judgeWarmStart', 1); // the rollout worker builds the next demonstrations
    await fleet.killWorker('rollout');
    await whileRunning(fleet, 'rewardModel', 'rolloutGroup'); // the judge samples
    await fleet.killWorker('rollout');
    await whileRunning(fleet, 'rewardModel', 'trainStep');
    await fleet.killWorker('gpu');
    await afterStep(fleet, 'rewardModel', 1);
    await fleet.killWorker('workflows');
    await fleet.killWorker('cpu');
    await whileRunning(fleet, 'policy', 'rewardGroup'); // the reward model judges the policy
    await fleet.killWorker('judge');
  });
  expect(adapters).toEqual(reference);
});

it('SIGKILL of the model server, a stop and restart of Temporal, and a restart of PostgreSQL', async () => {
  const temporalDir = tempDataDir('evalrl-fault-temporal-');
  const ports = { EVALRL_TEMPORAL_PORT: '37233', EVALRL_TEMPORAL_UI_PORT: '38233' };
  const temporal = stackConfig({ ...TEST_STACK_ENV, ...ports, EVALRL_DATA_DIR: temporalDir });
  await startTemporal(temporal); // the run's own, so that stopping it leaves the other tests' server alone
  try {
    const adapters = await runWithFault(
      'servers',
      18014,
      async (fleet) => {
        await whileRunning(fleet, 'rewardModel', 'rolloutGroup');
        await stopModelServer(fleet.server, 'SIGKILL');
        await startModelServer(fleet.server, tinyServerSettings(fleet.dir));
        await whileRunning(fleet, 'rewardModel', 'trainStep');
        await stopManaged(temporalProcess(temporal), 'SIGKILL');
        await new Promise((r) => setTimeout(r, 3000));
        await startTemporal(temporal);
        await whileRunning(fleet, 'policy', 'rolloutGroup');
        await stopPostgres(stackConfig());
        await new Promise((r) => setTimeout(r, 2000));
        await cli(['up']); // as an operator would (the server's binaries are an ES module jest cannot load)
      },
      ports,
    );
    expect(adapters).toEqual(reference);
  } finally {
    await stopManaged(temporalProcess(temporal));
    fs.rmSync(temporalDir, { recursive: true, force: true });
  }
});
