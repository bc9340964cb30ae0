import fs from 'node:fs';
import path from 'node:path';
import { Runtime } from '@temporalio/worker';
import type { Config } from '../../src/config';
import { TASK_QUEUES, type StageInput } from '../../src/contract';
import { hyperparametersSchema } from '../../src/hyperparameters';
import { vllmServe, type VllmServe } from '../../src/modelServer/vllmServe';
import { preflight } from '../../src/preflight/preflight';
import { rewardWeightsSchema } from '../../src/reward/deterministic';
import { loadRunSpec, type RunSpec } from '../../src/runSpec';
import { stopModelServer } from '../../src/stack/modelServer';
import { grpoStage } from '../../src/workflows/grpoStage';
import { workerLogger } from '../../src/workers/logger';
import { withWorkers } from './runFixtures';
import { cli, stackConfig, startTinyModelServer, tempDataDir, TEST_STACK_ENV } from './testStack';
import { startVllmDouble, without, type VllmDouble } from './vllmDouble';

jest.setTimeout(900_000);
Runtime.install({ logger: workerLogger() });

// The production spec's samplers, as vLLM doubles on a tiny model, beside a tiny trainer over one checkpoint folder.
const dir = tempDataDir('evalrl-vllm-double-');
const production = loadRunSpec(path.resolve(__dirname, '../../examples/production.yaml'));
let trainer: Config;
const doubles: VllmDouble[] = [];

/** The sampler command line of `spec` on the tiny model, on a loopback port. */
const serveOn = (spec: RunSpec, port: number): VllmServe =>
  vllmServe(spec, { model: path.join(dir, 'tiny-model'), host: '127.0.0.1', port });

async function startDouble(serve: VllmServe, name: string) {
  const double = await startVllmDouble(trainer.venv, serve, path.join(dir, `${name}.log`));
  doubles.push(double);
  return double;
}

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  trainer = await startTinyModelServer(dir, 18041);
  // What Qwen3 ships: vLLM's default (--generation-config auto) would sample with these.
  const generation = path.join(dir, 'tiny-model', 'generation_config.json');
  const shipped = JSON.parse(fs.readFileSync(generation, 'utf8'));
  fs.writeFileSync(generation, JSON.stringify({ ...shipped, temperature: 0.6, top_k: 20, top_p: 0.95 }));
});
afterAll(async () => {
  await Promise.allSettled(doubles.map((d) => d.stop()));
  await stopModelServer(stackConfig({ ...TEST_STACK_ENV, EVALRL_DATA_DIR: dir }));
  fs.rmSync(dir, { recursive: true, force: true });
});

const withSamplers = (urls: string[]) =>
  stackConfig({
    ...TEST_STACK_ENV,
    EVALRL_MODEL_SERVER_URL: trainer.modelServer.url,
    EVALRL_SAMPLING_SERVERS: urls.join(','),
  });

const misconfigurations: [string, (serve: VllmServe) => VllmServe, RegExp][] = [
  ['no served base name', (s) => without(s, '--served-model-name', 1), /--served-model-name base/],
  [
    'no tool-call parser',
    (s) => without(without(s, '--enable-auto-tool-choice'), '--tool-call-parser', 1),
    /--enable-auto-tool-choice --tool-call-parser hermes/,
  ],
  [
    'the generation config filling fields',
    (s) => without(s, '--generation-config', 1),
    /--generation-config vllm/,
  ],
];

it('passes the preflight of production.yaml with its sampler command, and fails it naming the flag of each misconfiguration', async () => {
  const [good, ...bad] = await Promise.all([
    startDouble(serveOn(production, 18042), 'good'),
    ...misconfigurations.map(([name, change], i) =>
      startDouble(change(serveOn(production, 18043 + i)), name),
    ),
  ]);
  const passed = await preflight(withSamplers([good.url]), production);
  expect(passed.filter((c) => !c.ok)).toEqual([]);
  expect(passed.map((c) => c.name)).toEqual(
    expect.arrayContaining([expect.stringMatching(/loads adapters from the shared checkpoint folder/)]),
  );
  for (const [i, [name, , fix]] of misconfigurations.entries()) {
    const checks = await preflight(withSamplers([bad[i].url]), production);
    const failed = checks.filter((c) => !c.ok);
    expect({ name, fixes: failed.map((c) => c.fix) }).toEqual({ name, fixes: [expect.stringMatching(fix)] });
  }
  // The command a user runs: exit 0 on the good deployment, 1 naming the flag on a bad one.
  const env = { ...TEST_STACK_ENV, EVALRL_MODEL_SERVER_URL: trainer.modelServer.url };
  const ok = await cli(['preflight', 'examples/production.yaml'], {
    ...env,
    EVALRL_SAMPLING_SERVERS: good.url,
  }).catch((err: { stdout: string; stderr: string }) => err);
  expect(ok.stdout + ok.stderr).not.toMatch(/FAIL/);
  await expect(
    cli(['preflight', 'examples/production.yaml'], { ...env, EVALRL_SAMPLING_SERVERS: bad[0].url }),
  ).rejects.toMatchObject({
    code: 1,
    stdout: expect.stringMatching(/fix: start vLLM with --served-model-name base/),
  });
  await Promise.all(bad.map((d) => d.stop()));
});

/** The policy stage on its own, scored by the deterministic layer: what samples it is the point here. */
const stageInput = (runId: string, adapter: string): StageInput => ({
  runId,
  stage: 'policy',
  seed: 5,
  adapter,
  startModel: 'base',
  steps: 3,
  startStep: 1,
  tasksPerStep: 2,
  groupSize: 2,
  env: {
    kind: 'policy',
    agent: {
      maxTurns: 2,
      contextTokens: 2048,
      maxTokensPerTurn: 24,
      temperature: 1,
      topP: 1,
      timeoutMs: 120_000,
      demonstration: false,
      searchHits: 10,
      bodyChars: 1000,
    },
    weights: rewardWeightsSchema.parse({}),
    reward: 'gold',
    judge: {
      model: 'base',
      weight: 0,
      settings: {
        mode: 'skill',
        reference: 'visible',
        maxTurns: 2,
        contextTokens: 2048,
        maxTokensPerTurn: 24,
        temperature: 1,
        topP: 1,
        retries: 0,
        timeoutMs: 120_000,
      },
    },
  },
  objective: 'grpo',
  hyperparameters: hyperparametersSchema.parse({ learning_rate: 1e-3 }),
  lora: { rank: 4, alpha: 8 },
  keepCheckpoints: 0,
  divideByStd: true,
  dynamicSampling: { enabled: false, minStd: 0.01, maxTopUps: 0 },
  evaluation: { kind: 'policy', everySteps: 100, split: 'test', count: 2 },
  activities: { maximumAttempts: 3, heartbeatTimeoutSeconds: 30 },
  continueAsNewEverySteps: 2,
});

async function waitFor(check: () => Promise<boolean>, ms = 300_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 200));
  }
}

it('runs a GRPO stage whose only sampler is a vLLM double, restarted mid-stage: the version is published again, every step trained once', async () => {
  const small = { ...production, sampling: { ...production.sampling, contextTokens: 2048 } };
  const sampler = await startDouble(serveOn(small, 18046), 'stage');
  const listed = async () =>
    ((await (await fetch(`${sampler.url}/v1/models`)).json()) as { data: { id: string }[] }).data.map(
      (m) => m.id,
    );
  const runId = `vllm-double-stage-${Date.now()}`;
  await withWorkers(withSamplers([sampler.url]), async (client, pool) => {
    const handle = await client.workflow.start(grpoStage, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: runId,
      args: [stageInput(runId, 'doubled')],
    });
    // Step 1 is published to the sampler; it crashes and comes back empty while step 2 samples from it.
    await waitFor(async () => (await listed()).includes('doubled@step-1'));
    await sampler.restart();
    const restarted = new Date();
    expect(await handle.result()).toMatchObject({ step: 3, phase: 'done' });

    const steps = fs.readdirSync(path.join(dir, 'checkpoints', 'doubled')).sort();
    expect(steps).toEqual(['step-0', 'step-1', 'step-2', 'step-3']); // no gap, none twice
    const { rows } = await pool.query(
      `SELECT step, array_agg(DISTINCT t->>'model') AS models, bool_and(t ? 'tokenIds') AS tokens, count(*)::int AS n
       FROM trajectories, jsonb_array_elements(turns) t WHERE run_id = $1 AND stage = 'policy' GROUP BY step ORDER BY step`,
      [runId],
    );
    expect(rows.map((r) => [r.step, r.models, r.tokens])).toEqual([
      [1, ['base'], true],
      [2, ['doubled@step-1'], true], // sampled after the restart: published again from its checkpoint
      [3, ['doubled@step-2'], true],
    ]);
    // Step 2's episodes were sampled after the restart: from step 1 published there again, from its checkpoint.
    const late = await pool.query(
      "SELECT count(*)::int AS n FROM trajectories WHERE run_id = $1 AND stage = 'policy' AND step = 2 AND created_at > $2",
      [runId, restarted],
    );
    expect(late.rows[0].n).toBeGreaterThan(0);
    const metrics = await pool.query('SELECT step FROM step_metrics WHERE run_id = $1 ORDER BY step', [
      runId,
    ]);
    expect(metrics.rows.map((r) => r.step)).toEqual([1, 2, 3]);
  });
});
