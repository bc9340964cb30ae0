import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import type pg from 'pg';
import type { Config } from '../../src/config';
import { createPool } from '../../src/db/pool';
import { parseRunSpec, type RunSpec } from '../../src/runSpec';
import { createWorkers, runWorkersUntil, WORKER_QUEUES } from '../../src/workers/start';

const root = path.resolve(__dirname, '../..');

/** A two-stage run sized for the tiny model: 2 steps per stage, 2 tasks of 2 samples, short episodes. */
export function tinyRunSpec(tag: string, seed = 11): RunSpec {
  const stage = {
    steps: 2,
    tasksPerStep: 2,
    groupSize: 2,
    hyperparameters: { learning_rate: 1e-3 },
    dynamicSampling: { enabled: false },
  };
  return parseRunSpec({
    name: `tiny-${tag}`,
    seed,
    models: { policy: { adapter: `policy-${tag}` }, rewardModel: { adapter: `rm-${tag}` } },
    lora: { rank: 4, alpha: 8 },
    sampling: { maxTurns: 2, maxTokensPerTurn: 24, contextTokens: 2048, timeoutSeconds: 120 },
    stages: { rewardModel: stage, policy: stage },
    rewardModelData: { trainQuestions: 2, testQuestions: 2, episodesPerQuestion: 1, balance: false },
    judge: { mode: 'skill', maxTurns: 2, maxTokensPerTurn: 24, retries: 0 },
    evaluation: { everySteps: 100, questions: 2, rewardModelEpisodes: 2 },
    continueAsNewEverySteps: 1,
    activities: { maximumAttempts: 3, heartbeatTimeoutSeconds: 10 },
  });
}

export async function waitFor(check: () => Promise<boolean>, ms = 180_000, what = 'a condition') {
  const deadline = Date.now() + ms;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A worker process of the built CLI, as an operator would start it, for the given queues. */
export function spawnWorker(queues: string, env: Record<string, string>): ChildProcess {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  delete childEnv.TEMPORAL_ADDRESS;
  delete childEnv.DATABASE_URL;
  const child = spawn('node', [path.join(root, 'dist/src/cli/main.js'), 'worker', '--queues', queues], {
    env: childEnv,
    cwd: root,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return child;
}

export async function stopWorker(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM') {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill(signal);
  await exited;
}

/** Runs `use` with in-process workers for every queue, a Temporal client and a pool, all closed after. */
export async function withWorkers<T>(
  config: Config,
  use: (client: Client, pool: pg.Pool) => Promise<T>,
): Promise<T> {
  const pool = createPool(config);
  const workers = await createWorkers(config, pool, WORKER_QUEUES);
  const connection = await Connection.connect({ address: config.temporal.address });
  try {
    return await runWorkersUntil(
      workers,
      use(new Client({ connection, namespace: config.temporal.namespace }), pool),
    );
  } finally {
    await connection.close();
    await pool.end();
  }
}

/** The test question the agent tests share: the first "who sent" question of allen-p's inbox. */
export async function loadTestQuestion(pool: pg.Pool) {
  const { rows } = await pool.query(
    `SELECT q.id, q.question, q.answer, q.message_ids, q.inbox_id, q.query_date, i.address
     FROM questions q JOIN inboxes i ON i.id = q.inbox_id WHERE q.inbox_id = 'allen-p' AND q.source = 'template:who_sent'
     ORDER BY q.id LIMIT 1`,
  );
  const r = rows[0];
  return {
    id: r.id as string,
    question: r.question as string,
    answer: r.answer as string,
    messageIds: r.message_ids as string[],
    inbox: r.inbox_id as string,
    inboxAddress: r.address as string,
    queryDate: r.query_date as Date,
  };
}
