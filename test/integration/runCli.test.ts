import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import type { Config } from '../../src/config';
import { stopModelServer } from '../../src/stack/modelServer';
import { WORKER_QUEUES } from '../../src/workers/start';
import { spawnWorker, stopWorker, tinyRunSpec } from './runFixtures';
import { cli, stackConfig, startTinyModelServer, tempDataDir, TEST_STACK_ENV } from './testStack';

const execFileAsync = promisify(execFile);

/** `evalrl run …` as a user types it, against the running test stack with one worker process per queue. */
jest.setTimeout(600_000);

const dir = tempDataDir('evalrl-run-cli-');
let server: Config;
let env: Record<string, string>;
let workers: ReturnType<typeof spawnWorker>[] = [];

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  server = await startTinyModelServer(dir, 18007);
  env = { ...TEST_STACK_ENV, EVALRL_MODEL_SERVER_URL: server.modelServer.url, EVALRL_GPU_HOST: 'host-cli' };
  workers = WORKER_QUEUES.map((q) => spawnWorker(q, env));
});
afterAll(async () => {
  await Promise.all(workers.map((w) => stopWorker(w)));
  await stopModelServer(server);
  fs.rmSync(dir, { recursive: true, force: true });
});

const specFile = (name: string, spec: unknown) => {
  const file = path.join(dir, `${name}.json`);
  fs.writeFileSync(file, JSON.stringify(spec));
  return file;
};

it('start → status → set → watch until done → list, with --json for scripts', async () => {
  const file = specFile('cli', tinyRunSpec('cli'));
  const started = JSON.parse((await cli(['run', 'start', file, '--json'], env)).stdout);
  expect(started.runId).toMatch(/^tiny-cli-/);
  expect(started.ui).toContain(`/workflows/${started.runId}`);

  const status = JSON.parse((await cli(['run', 'status', started.runId, '--json'], env)).stdout);
  expect(status).toMatchObject({ runId: started.runId, state: 'running' });
  const set = await cli(['run', 'set', started.runId, 'learning_rate=2e-3', 'clip_high=0.3'], env);
  expect(set.stdout).toMatch(/from the next step .*learning_rate=0.002.*clip_high=0.3/);

  const watched = await cli(['run', 'watch', started.runId, '--interval', '0.5'], env);
  expect(watched.stdout).toMatch(new RegExp(`run ${started.runId} \\(tiny-cli\\): done`));
  expect(watched.stdout).toMatch(/policy: step 2\/2, done/);
  expect(watched.stdout).toMatch(/eval policy:base/);
  // Not a terminal: one line per change (progress lines, time stripped, never repeat one another).
  const progress = watched.stdout
    .split('\n')
    .filter((l) => /^\d\d:\d\d:\d\d run /.test(l))
    .map((l) => l.slice(9));
  expect(progress.length).toBeGreaterThan(1);
  progress.slice(1).forEach((line, i) => expect(line).not.toBe(progress[i]));

  const human = await cli(['run', 'status', started.runId], env);
  expect(human.stdout).toMatch(/checkpoints: rm-cli@step-2, policy-cli@step-2/);
  let listed: { runId: string; state: string }[] = [];
  for (let i = 0; i < 50 && !listed.some((r) => r.runId === started.runId && r.state === 'done'); i++) {
    listed = JSON.parse((await cli(['run', 'list', '--json'], env)).stdout);
    await new Promise((r) => setTimeout(r, 200));
  }
  expect(listed).toContainEqual(expect.objectContaining({ runId: started.runId, state: 'done' }));

  // Its id is its own: another spec under it is refused before anything starts.
  const other = specFile('cli-other', { ...tinyRunSpec('cli'), seed: 99 });
  await expect(cli(['run', 'start', other, '--id', started.runId], env)).rejects.toMatchObject({
    stderr: expect.stringContaining(`--id ${started.runId}: that run exists with another spec`),
  });

  // Evaluations of the trained adapters, outside the run.
  const policyEval = JSON.parse(
    (await cli(['eval', 'policy-cli', '--spec', file, '--questions', '2', '--json'], env)).stdout,
  );
  expect(policyEval).toMatchObject({ kind: 'policy', model: 'policy-cli', metrics: { episodes: 2 } });
  const rmEval = JSON.parse(
    (await cli(['eval', 'rm-cli', '--run', started.runId, '--spec', file, '--questions', '2', '--json'], env))
      .stdout,
  );
  expect(rmEval).toMatchObject({ kind: 'rewardModel', model: 'rm-cli', metrics: { judgements: 2 } });

  // The report: a self-contained page with PNG charts beside it, rendered by a real browser.
  const out = path.join(dir, 'report');
  const report = JSON.parse((await cli(['report', started.runId, '--out', out, '--json'], env)).stdout);
  expect(report.html).toBe(path.join(out, 'report.html'));
  expect(report.pngs.map((f: string) => path.basename(f)).sort()).toEqual(
    ['clip', 'kl', 'loss', 'reward', 'skills', 'success', 'timing'].map((n) => `${n}.png`),
  );
  for (const png of report.pngs) expect(fs.readFileSync(png).subarray(1, 4).toString()).toBe('PNG');
  const dom = await renderHeadless(report.html);
  const charts = [...dom.matchAll(/<figure class="chart" data-chart="(\w+)"><svg[^>]*>[\s\S]*?<\/svg>/g)].map(
    (m) => m[1],
  );
  expect(charts.sort()).toEqual(['clip', 'kl', 'loss', 'reward', 'skills', 'success', 'timing']);
  expect(dom).toMatch(/<td>policy:base<\/td>/);
  expect(dom).toMatch(/<td>rewardModel:step-2<\/td>/);
});

/** The page's DOM after Debian's Chromium loaded and laid it out, headless. */
async function renderHeadless(file: string): Promise<string> {
  const profile = fs.mkdtempSync(path.join(dir, 'chromium-'));
  const { stdout } = await execFileAsync(
    '/usr/bin/chromium',
    [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      `--user-data-dir=${profile}`, '--dump-dom', `file://${file}`,
    ],
    { maxBuffer: 64 * 1024 * 1024, timeout: 120_000 },
  ); // prettier-ignore
  return stdout;
}

it('pause, resume and cancel a running run', async () => {
  const spec = tinyRunSpec('cli-steer');
  spec.stages.rewardModel.steps = 30;
  const { runId } = JSON.parse((await cli(['run', 'start', specFile('steer', spec), '--json'], env)).stdout);
  const status = async () => JSON.parse((await cli(['run', 'status', runId, '--json'], env)).stdout);
  const until = async (
    check: (s: { stages: { rewardModel?: { step: number; phase: string } } }) => boolean,
  ) => {
    for (let i = 0; i < 300 && !check(await status()); i++) await new Promise((r) => setTimeout(r, 500));
  };
  await until((s) => (s.stages.rewardModel?.step ?? 0) >= 1);
  await cli(['run', 'pause', runId], env);
  await until((s) => s.stages.rewardModel?.phase === 'paused');
  expect((await status()).stages.rewardModel.phase).toBe('paused');
  // With no worker on the workflows queue, status is what the run stored, and says so.
  const queue = WORKER_QUEUES.indexOf('workflows');
  await stopWorker(workers[queue], 'SIGKILL');
  const stored = JSON.parse((await cli(['run', 'status', runId, '--json'], env)).stdout);
  expect(stored.note).toMatch(/no worker answered/);
  expect(stored.stages.rewardModel).toMatchObject({ phase: 'unknown', totalSteps: 30 });
  expect(stored.stages.rewardModel.step).toBeGreaterThanOrEqual(1);
  expect((await cli(['run', 'status', runId], env)).stdout).toMatch(/shown from what the run stored/);
  workers[queue] = spawnWorker('workflows', env);
  await cli(['run', 'resume', runId], env);
  expect((await cli(['run', 'cancel', runId], env)).stdout).toMatch(/cancel: sent/);
  const final = await cli(['run', 'watch', runId, '--interval', '0.5'], env);
  expect(final.stdout).toMatch(/: cancelled/);
});

it('says what to do when something is wrong', async () => {
  const bad = specFile('bad', { ...tinyRunSpec('bad'), seed: -1, stages: { policy: {} } });
  await expect(cli(['run', 'start', bad], env)).rejects.toMatchObject({
    stderr: expect.stringMatching(
      /invalid run spec[\s\S]*seed:[\s\S]*stages\.rewardModel:[\s\S]*stages\.policy\.steps:/,
    ),
  });
  await expect(cli(['run', 'start', path.join(dir, 'missing.yaml')], env)).rejects.toMatchObject({
    stderr: expect.stringMatching(/missing\.yaml: invalid run spec\n {2}- \(file\): cannot be read/),
  });
  await expect(cli(['run', 'status', 'no-such-run'], env)).rejects.toMatchObject({
    stderr: expect.stringMatching(/unknown run no-such-run: `evalrl run list` shows the runs/),
  });
  await expect(cli(['run', 'set', 'no-such-run', 'warmup=3'], env)).rejects.toMatchObject({
    stderr: expect.stringMatching(/warmup: Unrecognized key/),
  });
  // What the model server would refuse is refused by the CLI, before it reaches the run.
  await expect(cli(['run', 'set', 'no-such-run', 'learning_rate=5'], env)).rejects.toMatchObject({
    stderr: expect.stringMatching(/learning_rate: Too big: expected number to be <=1/),
  });
  await expect(cli(['run', 'retry', 'no-such-run', 'clip_high=20'], env)).rejects.toMatchObject({
    stderr: expect.stringMatching(/clip_high: Too big/),
  });
  await expect(cli(['run', 'list'], { ...env, EVALRL_TEMPORAL_PORT: '17299' })).rejects.toMatchObject({
    stderr: expect.stringMatching(
      /Temporal at 127\.0\.0\.1:17299 is not reachable: start the stack with `evalrl up`/,
    ),
  });
});

it('experiment ladder: base, warm start, untrained-RM and trained-RM policies from two runs on one seed', async () => {
  const spec = tinyRunSpec('ladder');
  spec.stages.policyWarmStart = {
    ...spec.stages.policyWarmStart,
    enabled: true,
    demonstrations: 2,
    epochs: 1,
    tasksPerStep: 2,
  };
  const { stdout } = await cli(['experiment', 'ladder', specFile('ladder', spec), '--json'], env);
  const result = JSON.parse(stdout);
  for (const key of ['base', 'warm_start', 'rl_untrained_rm', 'rl_trained_rm']) {
    expect(result.rows[key]).toMatchObject({ n: 2, success: expect.any(Number), se: expect.any(Number) });
  }
  expect(result.rm_agreement).toMatchObject({
    untrained: expect.any(Number),
    trained: expect.any(Number),
    n: 2,
  });
  // Step 1 of both policy stages samples alike (same warm start, seed, questions): the judges are compared there.
  expect(result.judges.episodes).toBeGreaterThan(0);
  expect(result.judges.differing).toBeLessThanOrEqual(result.judges.episodes);
  expect(result.wall_seconds).toBeGreaterThan(0);
  const untrained = JSON.parse(
    (await cli(['run', 'status', `${result.experimentId}/untrained-rm`, '--json'], env)).stdout,
  );
  const trained = JSON.parse(
    (await cli(['run', 'status', `${result.experimentId}/trained-rm`, '--json'], env)).stdout,
  );
  expect(untrained).toMatchObject({ state: 'done', stages: { policy: { step: 2 } } });
  // The second run trains only the policy, from the first run's warm start, judged by the untrained judge.
  expect(untrained.stages.rewardModel).toBeUndefined();
  expect(untrained.stages.policyWarmStart).toBeUndefined();
  expect(trained).toMatchObject({
    state: 'done',
    stages: { policyWarmStart: { step: 1 }, rewardModel: { step: 2 }, policy: { step: 2 } },
  });
  // The second run started from the first's warm starts while the first was still training.
  const connection = await Connection.connect({ address: stackConfig().temporal.address });
  try {
    const client = new Client({ connection, namespace: stackConfig().temporal.namespace });
    const describe = (run: string) => client.workflow.getHandle(`${result.experimentId}/${run}`).describe();
    const [first, second] = [await describe('trained-rm'), await describe('untrained-rm')];
    expect(second.startTime.getTime()).toBeLessThan(first.closeTime!.getTime());
  } finally {
    await connection.close();
  }
});
