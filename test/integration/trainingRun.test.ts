import fs from 'node:fs';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { Runtime, Worker } from '@temporalio/worker';
import { workerLogger } from '../../src/workers/logger';
import type { Config } from '../../src/config';
import { startModelServer, stopModelServer } from '../../src/stack/modelServer';
import {
  cancelSignal,
  pauseSignal,
  resumeSignal,
  retryUpdate,
  runStatusQuery,
  TASK_QUEUES,
} from '../../src/contract';
import { trainingRun } from '../../src/workflows/trainingRun';
import { tinyRunSpec, waitFor, withWorkers } from './runFixtures';
import { cli, startTinyModelServer, tempDataDir, TEST_STACK_ENV, tinyServerSettings } from './testStack';

jest.setTimeout(900_000);
Runtime.install({ logger: workerLogger('ERROR') }); // activity failures are part of these tests

const dir = tempDataDir('evalrl-training-run-');
let config: Config;

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  config = await startTinyModelServer(dir, 18005);
});
afterAll(async () => {
  await stopModelServer(config);
  fs.rmSync(dir, { recursive: true, force: true });
});

const checkpoints = (adapter: string) => fs.readdirSync(path.join(dir, 'checkpoints', adapter)).sort();

it('runs both stages: the policy is judged by the reward-model adapter stage 1 trained', async () => {
  const spec = tinyRunSpec('full');
  await withWorkers(config, async (client, pool) => {
    const runId = `run-full-${Date.now()}`;
    const handle = await client.workflow.start(trainingRun, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: runId,
      args: [{ runId, spec }],
    });
    const result = await handle.result();
    expect(result).toMatchObject({ state: 'done', phase: 'done', blocked: null });
    expect(result.stages.rewardModel).toMatchObject({ step: 2, phase: 'done' });
    expect(result.stages.policy).toMatchObject({ step: 2, phase: 'done' });
    expect(result.checkpoints).toEqual({ 'rm-full': 2, 'policy-full': 2 });
    expect(result.evaluations.map((e) => e.label).sort()).toEqual([
      'policy:base',
      'policy:step-2',
      'rewardModel:step-2',
      'rewardModel:untrained',
    ]);
    expect(result.best?.kind).toBe('policy');
    expect(checkpoints('rm-full')).toEqual(['step-0', 'step-1', 'step-2']);
    expect(checkpoints('policy-full')).toEqual(['step-0', 'step-1', 'step-2']);

    // Stage 1 trained on the reward model's own judgements of labelled candidates…
    const rm = await pool.query(
      `SELECT count(*)::int AS n FROM judgements j JOIN trajectories t ON t.id = j.trajectory_id
       WHERE t.run_id = $1 AND t.stage = 'candidates:train' AND j.judge_key LIKE $2`,
      [runId, `${runId}:rewardModel:%`],
    );
    expect(rm.rows[0].n).toBe(2 * 2 * 2); // steps × tasks × group
    // …and stage 2's episodes were judged by that adapter.
    const judged = await pool.query(
      `SELECT DISTINCT j.judge_model FROM judgements j JOIN trajectories t ON t.id = j.trajectory_id
       WHERE t.run_id = $1 AND t.stage = 'policy'`,
      [runId],
    );
    expect(judged.rows).toEqual([{ judge_model: 'rm-full@step-2' }]); // its last step, by address
    const published = await pool.query(
      'SELECT adapter, step, sha256 FROM published_adapters WHERE run_id = $1 ORDER BY adapter, step',
      [runId],
    );
    expect(published.rows.map((r) => `${r.adapter}@${r.step}`)).toEqual([
      'policy-full@1',
      'policy-full@2',
      'rm-full@1',
      'rm-full@2',
    ]);
    const metrics = await pool.query(
      'SELECT stage, step FROM step_metrics WHERE run_id = $1 ORDER BY stage, step',
      [runId],
    );
    expect(metrics.rows.map((r) => `${r.stage}:${r.step}`)).toEqual([
      'policy:1',
      'policy:2',
      'rewardModel:1',
      'rewardModel:2',
    ]);

    // The trained judge was evaluated by the run, scheduled before the policy stage ended: beside it.
    const history = await handle.fetchHistory();
    const events = history.events ?? [];
    const judgeEvaluation = events.findIndex((e) => {
      const a = e.activityTaskScheduledEventAttributes;
      const input = Buffer.from(a?.input?.payloads?.[0]?.data ?? []).toString();
      return a?.activityType?.name === 'evaluate' && input.includes('"label":"rewardModel:step-2"');
    });
    const policyEnded = events.findIndex(
      (e) =>
        e.childWorkflowExecutionCompletedEventAttributes?.workflowExecution?.workflowId === `${runId}/policy`,
    );
    expect(judgeEvaluation).toBeGreaterThan(-1);
    expect(judgeEvaluation).toBeLessThan(policyEnded);
    expect(result.stages.rewardModel!.evaluations).toEqual([]); // not evaluated inside its stage as well

    // Determinism: the run's recorded history replays against the current code.
    await Worker.runReplayHistory({ workflowsPath: require.resolve('../../src/workflows') }, history, runId);
    // Listed by its search attributes (visibility is eventually consistent).
    await waitFor(
      async () => {
        for await (const w of client.workflow.list({
          query: `WorkflowType = 'trainingRun' AND EvalrlRunId = '${runId}' AND EvalrlStatus = 'done'`,
        }))
          return w.workflowId === runId;
        return false;
      },
      20_000,
      'the run in the visibility store',
    );

    // A second run may not take over adapters this one trained: refused before anything starts.
    const thief = `run-thief-${Date.now()}`;
    const refused = client.workflow.execute(trainingRun, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: thief,
      args: [{ runId: thief, spec: { ...tinyRunSpec('full'), name: 'thief' } }],
    });
    await expect(refused).rejects.toBeInstanceOf(WorkflowFailedError);
    await expect(refused).rejects.toMatchObject({
      cause: {
        cause: {
          message: expect.stringMatching(/models: adapter "rm-full" belongs to run run-full-/),
        },
      },
    });
  });
});

it('a stage that fails after its retries blocks the run; retry with a new learning rate completes it', async () => {
  const spec = tinyRunSpec('blocked');
  spec.activities.maximumAttempts = 2;
  spec.stages.rewardModel.steps = 3; // wherever the pause lands after step 1, a step is left to fail
  await withWorkers(config, async (client, pool) => {
    const runId = `run-blocked-${Date.now()}`;
    const handle = await client.workflow.start(trainingRun, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: runId,
      args: [{ runId, spec }],
    });
    const status = () => handle.query(runStatusQuery);
    await waitFor(
      async () => ((await status()).stages.rewardModel?.step ?? 0) >= 1,
      300_000,
      'stage 1, step 1',
    );
    await handle.signal(pauseSignal);
    await waitFor(async () => (await status()).stages.rewardModel?.phase === 'paused', 60_000, 'the pause');
    const pausedAt = (await status()).stages.rewardModel!.step;
    // The model server goes away for longer than the retry budget: the stage fails, the run blocks.
    await stopModelServer(config, 'SIGKILL');
    await handle.signal(resumeSignal);
    await waitFor(async () => (await status()).state === 'blocked', 120_000, 'the run to block');
    expect((await status()).blocked).toMatchObject({ phase: 'rewardModel', error: expect.any(String) });
    expect((await handle.describe()).status.name).toBe('RUNNING'); // blocked, not failed

    await startModelServer(config, tinyServerSettings(dir));
    await handle.executeUpdate(retryUpdate, { args: [{ hyperparameters: { learning_rate: 2e-3 } }] });
    expect(await handle.result()).toMatchObject({ state: 'done', blocked: null });
    const { rows } = await pool.query(
      `SELECT step, metrics->>'optim/lr' AS lr FROM step_metrics WHERE run_id = $1 AND stage = 'rewardModel' ORDER BY step`,
      [runId],
    );
    expect(rows.map((r) => [r.step, Number(r.lr)])).toEqual(
      [1, 2, 3].map((step) => [step, step <= pausedAt ? 1e-3 : 2e-3]),
    );
    expect(checkpoints('rm-blocked')).toEqual(['step-0', 'step-1', 'step-2', 'step-3']);
  });
});

it('cancel while blocked ends the run', async () => {
  const spec = tinyRunSpec('cancel-blocked');
  spec.activities.maximumAttempts = 1;
  await stopModelServer(config, 'SIGKILL');
  try {
    await withWorkers(config, async (client) => {
      const runId = `run-cancel-blocked-${Date.now()}`;
      const handle = await client.workflow.start(trainingRun, {
        taskQueue: TASK_QUEUES.workflows,
        workflowId: runId,
        args: [{ runId, spec }],
      });
      await waitFor(
        async () => (await handle.query(runStatusQuery)).state === 'blocked',
        120_000,
        'the block',
      );
      expect((await handle.query(runStatusQuery)).blocked?.phase).toBe('prepare');
      await handle.signal(cancelSignal);
      expect(await handle.result()).toMatchObject({ state: 'cancelled' });
    });
  } finally {
    await startModelServer(config, tinyServerSettings(dir));
  }
});
