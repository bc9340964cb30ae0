import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { parseRunSpec, type RunSpec } from '../../src/runSpec';

const root = path.resolve(__dirname, '../..');

/** A two-stage run sized for the tiny model: 2 steps per stage, 2 tasks of 2 samples, short episodes. */
export function tinyRunSpec(tag: string, seed = 11): RunSpec {
  const stage = {
    steps: 2,
    tasksPerStep: 2,
    groupSize: 2,
    learningRate: 1e-3,
    microBatch: 8,
    dynamicSampling: { enabled: false },
  };
  return parseRunSpec({
    name: `tiny-${tag}`,
    seed,
    models: { policy: { adapter: `policy-${tag}` }, rewardModel: { adapter: `rm-${tag}` } },
    lora: { rank: 4, alpha: 8 },
    sampling: { maxTurns: 2, maxTokensPerTurn: 24, contextTokens: 2048, timeoutSeconds: 120 },
    stages: { rewardModel: stage, policy: stage },
    rewardModelData: { trainQuestions: 2, testQuestions: 2, episodesPerQuestion: 1 },
    judge: { mode: 'skill', maxTurns: 2, retries: 0 },
    evaluation: { everySteps: 100, questions: 2 },
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
