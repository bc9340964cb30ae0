import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Runtime, Worker } from '@temporalio/worker';
import { workerLogger } from '../../src/workers/logger';
import type { Activities } from '../../src/activities';
import {
  cancelSignal,
  pauseSignal,
  resumeSignal,
  retryUpdate,
  runStatusQuery,
  SEARCH_ATTRIBUTES,
  setHyperparametersUpdate,
  TASK_QUEUES,
} from '../../src/contract';
import type { ScoredGroup } from '../../src/grpo/env';
import { trainingRun } from '../../src/workflows/trainingRun';
import { tinyRunSpec, waitFor } from './runFixtures';

/**
 * The TrainingRun and GrpoStage workflow logic on a local dev server, with in-memory activities: the
 * sequencing, blocked/retry, run-level pause and hyperparameter changes, cancel. (The real activities are
 * exercised in trainingRun.test.ts and faults.test.ts.)
 */
jest.setTimeout(120_000);
Runtime.install({ logger: workerLogger('ERROR') });

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: path.resolve(__dirname, '../../.venv/bin/temporal') },
      ip: '127.0.0.1',
      searchAttributes: SEARCH_ATTRIBUTES,
    },
  });
});
afterAll(() => env?.teardown());

/** In-memory activities that record what the workflows asked for. */
function fakeActivities(failTrainAt?: { stage: string; step: number }) {
  const trained: { adapter: string; step: number; lr?: number; objective: string; initFrom?: string }[] = [];
  const judgedBy = new Set<string>();
  const recorded = new Map<string, number>();
  let failed = false;
  const group = (taskId: string): ScoredGroup => ({
    taskId,
    samples: [{ kind: 'trajectory', id: 1 }],
    rewards_G: [0, 1],
    success_G: [0, 1],
    failed_G: [0, 0],
  });
  const cpu: Partial<Activities['cpu']> = {
    registerRun: async () => {},
    sampleTasks: async (i) =>
      Array.from({ length: i.count }, (_, k) => `${i.stage}-${i.step}-${k + i.offset}`),
    computeAdvantages: async (i) => ({
      advantages: i.groups.flatMap((g) => g.samples.map((sample) => ({ sample, advantage: 1 }))),
      kept: i.groups.map((g) => g.taskId),
      dropped: [],
      missing: 0,
    }),
    recordStepMetrics: async (i) => void recorded.set(`${i.stage}`, i.step),
    recordAdapterVersion: async () => {},
    nextStep: async (i) => (recorded.get(i.stage) ?? 0) + 1,
  };
  const rollout: Partial<Activities['rollout']> = {
    rolloutGroup: async () => [{ kind: 'trajectory', id: 1 }],
    prepareCandidates: async () => ({ correct: 2, incorrect: 2 }),
    evaluate: async (i) => ({ label: i.label, kind: i.kind, model: i.model, metrics: { successRate: 0.5 } }),
  };
  const judge: Activities['judge'] = {
    rewardGroup: async (i) => {
      if (i.env.kind === 'policy') judgedBy.add(i.env.judge.model);
      return group(i.taskId);
    },
  };
  const host: Activities['gpuHost'] = {
    trainStep: async (i) => {
      if (failTrainAt && !failed && i.adapter.startsWith(failTrainAt.stage) && i.step === failTrainAt.step) {
        failed = true;
        throw ApplicationFailure.nonRetryable('the server refused the step', 'BadTrainRequest');
      }
      trained.push({
        adapter: i.adapter,
        step: i.step,
        lr: i.hyperparameters.learning_rate,
        objective: i.objective,
        initFrom: i.lora.init_from,
      });
      await new Promise((r) => setTimeout(r, 50));
      return { adapter: i.adapter, step: i.step, loss: 0.1, clip_fraction: 0, approx_kl_old: 0, mismatch_kl: 0, is_weight_mean: 0, is_capped_fraction: 0, kl_ref: 0, entropy: 1, grad_norm: 1, update_norm: 0.1, no_signal: false, tokens: 10, seconds: 0.05, learning_rate: i.hyperparameters.learning_rate ?? 0, checkpoint: '/tmp/x', sha256: 'ab', cached: false }; // prettier-ignore
    },
  };
  return { cpu, rollout, judge, host, trained, judgedBy };
}

/**
 * Workers of every queue around the fake activities. With several GPU host queues, "which host?" names them
 * in turn; `use` sees where each step trained, and names steps after which their host goes away.
 */
async function withFakeWorkers<T>(
  fakes: ReturnType<typeof fakeActivities>,
  use: (hosts: { trainedOn: Map<string, string>; goneAfter: Set<string>; asked: () => number }) => Promise<T>,
  hostQueues = ['fake-gpu-host'],
) {
  const { nativeConnection: connection, namespace } = env;
  const base = { connection, namespace };
  let asked = 0;
  const trainedOn = new Map<string, string>();
  const goneAfter = new Set<string>();
  const hostWorkers = new Map<string, Worker>();
  for (const taskQueue of hostQueues)
    hostWorkers.set(
      taskQueue,
      await Worker.create({
        ...base,
        taskQueue,
        shutdownGraceTime: '5 seconds', // a host shut down inside its activity still reports its result
        activities: {
          trainStep: async (i: Parameters<Activities['gpuHost']['trainStep']>[0]) => {
            const result = await fakes.host.trainStep(i);
            trainedOn.set(`${i.adapter}@${i.step}`, taskQueue);
            // Shut down before returning: the host takes no further task.
            if (goneAfter.has(`${i.adapter}@${i.step}`)) hostWorkers.get(taskQueue)!.shutdown();
            return result;
          },
        },
      }),
    );
  const workers = await Promise.all([
    Worker.create({
      ...base,
      taskQueue: TASK_QUEUES.workflows,
      workflowsPath: require.resolve('../../src/workflows'),
    }),
    Worker.create({ ...base, taskQueue: TASK_QUEUES.cpu, activities: fakes.cpu }),
    Worker.create({ ...base, taskQueue: TASK_QUEUES.rollout, activities: fakes.rollout }),
    Worker.create({ ...base, taskQueue: TASK_QUEUES.judge, activities: fakes.judge }),
    Worker.create({
      ...base,
      taskQueue: TASK_QUEUES.gpu,
      activities: { gpuHost: async () => hostQueues[asked++ % hostQueues.length] },
    }),
  ]);
  const all = [...workers, ...hostWorkers.values()];
  const running = all.map((w) => w.run());
  try {
    return await use({ trainedOn, goneAfter, asked: () => asked });
  } finally {
    for (const w of all) if (w.getState() === 'RUNNING') w.shutdown();
    await Promise.all(running);
  }
}

const start = (tag: string, spec = tinyRunSpec(tag), continueAsNewAfterEvents?: number) =>
  env.client.workflow.start(trainingRun, {
    taskQueue: TASK_QUEUES.workflows,
    workflowId: `logic-${tag}-${Date.now()}`,
    args: [{ runId: `logic-${tag}`, spec, continueAsNewAfterEvents }],
  });

it('sequences prepare → baseline → reward-model stage → policy stage judged by the trained RM adapter', async () => {
  const fakes = fakeActivities();
  await withFakeWorkers(fakes, async () => {
    const result = await (await start('order')).result();
    expect(result).toMatchObject({
      state: 'done',
      phase: 'done',
      checkpoints: { 'rm-order': 2, 'policy-order': 2 },
    });
    expect(fakes.trained.map((t) => `${t.adapter}@${t.step}`)).toEqual([
      'rm-order@1',
      'rm-order@2',
      'policy-order@1',
      'policy-order@2',
    ]);
    expect([...fakes.judgedBy]).toEqual(['rm-order@step-2']); // the trained RM at its last step
    expect(result.evaluations.map((e) => e.label)).toEqual([
      'policy:base',
      'rewardModel:untrained',
      'rewardModel:step-2',
      'policy:step-2',
    ]);
  });
});

it('with warm starts: policy warm start → data → judge warm start → baseline → GRPO stages from the warm adapters', async () => {
  const fakes = fakeActivities();
  await withFakeWorkers(fakes, async () => {
    const spec = tinyRunSpec('warm');
    spec.stages.policyWarmStart = {
      ...spec.stages.policyWarmStart,
      enabled: true,
      demonstrations: 4,
      epochs: 1,
      tasksPerStep: 2,
    };
    spec.stages.judgeWarmStart = {
      ...spec.stages.judgeWarmStart,
      enabled: true,
      demonstrations: 2,
      epochs: 2,
      tasksPerStep: 2,
    };
    const handle = await start('warm', spec);
    const result = await handle.result();
    expect(result.state).toBe('done');
    expect(fakes.trained.map((t) => `${t.adapter}@${t.step}:${t.objective}:${t.initFrom ?? ''}`)).toEqual([
      'policy-warm-warm@1:sft:',
      'policy-warm-warm@2:sft:',
      'rm-warm-warm@1:sft:',
      'rm-warm-warm@2:sft:',
      'rm-warm@1:grpo:rm-warm-warm@step-2',
      'rm-warm@2:grpo:rm-warm-warm@step-2',
      'policy-warm@1:grpo:policy-warm-warm@step-2',
      'policy-warm@2:grpo:policy-warm-warm@step-2',
    ]);
    expect([...fakes.judgedBy]).toEqual(['rm-warm@step-2']);
    expect(result.evaluations.map((e) => e.label).sort()).toEqual([
      'judgeWarmStart:step-2',
      'policy:base',
      'policy:step-2',
      'policyWarmStart:step-2',
      'rewardModel:step-2',
    ]);
    // Each stage's last evaluation ran in the run, scheduled before the next stage started: beside what follows.
    const events = (await handle.fetchHistory()).events ?? [];
    const evaluation = (label: string) =>
      events.findIndex((e) => {
        const a = e.activityTaskScheduledEventAttributes;
        const input = Buffer.from(a?.input?.payloads?.[0]?.data ?? []).toString();
        return a?.activityType?.name === 'evaluate' && input.includes(`"label":"${label}"`);
      });
    const started = (stage: string) =>
      events.findIndex(
        (e) =>
          e.childWorkflowExecutionStartedEventAttributes?.workflowExecution?.workflowId ===
          `logic-warm/${stage}`,
      );
    // The base policy's evaluation needs no trained weights: it samples beside the data, before the judge's warm start.
    expect(evaluation('policy:base')).toBeGreaterThan(started('policyWarmStart'));
    expect(evaluation('policy:base')).toBeLessThan(started('judgeWarmStart'));
    for (const [stage, next] of [
      ['policyWarmStart', 'judgeWarmStart'],
      ['judgeWarmStart', 'rewardModel'],
      ['rewardModel', 'policy'],
    ] as const) {
      expect(result.stages[stage]?.evaluations).toEqual([]);
      expect(evaluation(`${stage}:step-2`)).toBeGreaterThan(started(stage));
      expect(evaluation(`${stage}:step-2`)).toBeLessThan(started(next));
    }
  });
});

it('a base evaluation that failed beside the data is tried again in the baseline phase', async () => {
  const fakes = fakeActivities();
  const evaluate = fakes.rollout.evaluate!;
  let baseTries = 0;
  fakes.rollout.evaluate = async (i) => {
    if (i.label === 'policy:base' && baseTries++ === 0)
      throw ApplicationFailure.nonRetryable('the model server went away', 'ModelServerError');
    return evaluate(i);
  };
  await withFakeWorkers(fakes, async () => {
    const result = await (await start('base-retry')).result();
    expect(result.state).toBe('done');
    expect(baseTries).toBe(2);
    expect(result.evaluations.map((e) => e.label)).toContain('policy:base');
  });
});

it('a failed stage blocks the run until retry, which applies new hyperparameters to that stage', async () => {
  const fakes = fakeActivities({ stage: 'rm', step: 2 });
  await withFakeWorkers(fakes, async () => {
    const handle = await start('retry');
    await waitFor(async () => (await handle.query(runStatusQuery)).state === 'blocked', 60_000, 'the block');
    expect((await handle.query(runStatusQuery)).blocked).toMatchObject({
      phase: 'rewardModel',
      error: 'the server refused the step',
      retries: 0,
    });
    // A retry the run would refuse is refused to the caller, and the run stays blocked and cancellable.
    await expect(
      handle.executeUpdate(retryUpdate, { args: [{ hyperparameters: { learning_rate: 5 } }] }),
    ).rejects.toMatchObject({ cause: { message: expect.stringMatching(/learning_rate: Too big/) } });
    await expect(
      handle.executeUpdate(retryUpdate, { args: [{ hyperparameters: { warmup: 3 } as never }] }),
    ).rejects.toMatchObject({ cause: { message: expect.stringMatching(/warmup/) } });
    expect((await handle.query(runStatusQuery)).state).toBe('blocked');
    expect(
      await handle.executeUpdate(retryUpdate, { args: [{ hyperparameters: { learning_rate: 5e-3 } }] }),
    ).toEqual({
      phase: 'rewardModel',
    });
    expect(await handle.result()).toMatchObject({ state: 'done' });
    await expect(handle.executeUpdate(retryUpdate, { args: [{}] })).rejects.toThrow(); // done: nothing to retry
    expect(fakes.trained.map((t) => [`${t.adapter}@${t.step}`, t.lr])).toEqual([
      ['rm-retry@1', 1e-3],
      ['rm-retry@2', 5e-3],
      ['policy-retry@1', 1e-3],
      ['policy-retry@2', 1e-3],
    ]);
  });
});

it('a stage keeps its GPU host through continue-as-new and retry, and moves only when the host is gone', async () => {
  const fakes = fakeActivities({ stage: 'rm', step: 2 });
  await withFakeWorkers(
    fakes,
    async ({ trainedOn, goneAfter, asked }) => {
      const spec = tinyRunSpec('hosts'); // continues as new after every step
      spec.stages.rewardModel.steps = 4;
      spec.stages.policy.steps = 3;
      goneAfter.add('rm-hosts@3'); // then the next step waits out the heartbeat timeout and moves
      const handle = await start('hosts', spec);
      await waitFor(
        async () => (await handle.query(runStatusQuery)).state === 'blocked',
        60_000,
        'the block',
      );
      await handle.executeUpdate(retryUpdate, { args: [{}] });
      await waitFor(async () => trainedOn.has('rm-hosts@3'), 60_000, 'step 3 after the retry');
      expect(asked()).toBe(1); // neither continue-as-new nor the retry asked again
      const rmHost = trainedOn.get('rm-hosts@1')!;
      expect([2, 3].map((step) => trainedOn.get(`rm-hosts@${step}`))).toEqual([rmHost, rmHost]);
      expect(await handle.result()).toMatchObject({
        state: 'done',
        checkpoints: { 'rm-hosts': 4, 'policy-hosts': 3 },
      });
      const other = rmHost === 'gpu-a' ? 'gpu-b' : 'gpu-a';
      expect(trainedOn.get('rm-hosts@4')).toBe(other);
      expect([1, 2, 3].map((step) => trainedOn.get(`policy-hosts@${step}`))).toEqual([other, other, other]);
      expect(fakes.trained.map((t) => `${t.adapter}@${t.step}`)).toEqual([
        ...[1, 2, 3, 4].map((step) => `rm-hosts@${step}`),
        ...[1, 2, 3].map((step) => `policy-hosts@${step}`),
      ]);
    },
    ['gpu-a', 'gpu-b'],
  );
});

it('a run continues as new in the middle of its stages, trains each step once, and still blocks on a failure', async () => {
  const fakes = fakeActivities({ stage: 'rm', step: 3 });
  await withFakeWorkers(fakes, async () => {
    const spec = tinyRunSpec('long');
    spec.stages.rewardModel.steps = 4;
    spec.stages.policy.steps = 4;
    // A short history limit: the run continues as new while each stage runs (they report every step).
    const handle = await start('long', spec, 25);
    await waitFor(async () => (await handle.query(runStatusQuery)).state === 'blocked', 60_000, 'the block');
    expect((await handle.describe()).runId).not.toBe(handle.firstExecutionRunId);
    expect((await handle.query(runStatusQuery)).blocked).toMatchObject({
      phase: 'rewardModel',
      error: 'the server refused the step',
    });
    await handle.executeUpdate(retryUpdate, { args: [{}] });
    const result = await handle.result();
    expect(result).toMatchObject({ state: 'done', checkpoints: { 'rm-long': 4, 'policy-long': 4 } });
    expect(fakes.trained.map((t) => `${t.adapter}@${t.step}`)).toEqual([
      ...[1, 2, 3, 4].map((step) => `rm-long@${step}`),
      ...[1, 2, 3, 4].map((step) => `policy-long@${step}`),
    ]);
    expect(result.evaluations.map((e) => e.label)).toEqual([
      'policy:base',
      'rewardModel:untrained',
      'rewardModel:step-4',
      'policy:step-4',
    ]);
    expect([...fakes.judgedBy]).toEqual(['rm-long@step-4']);
  });
});

it('run-level pause holds the stage; setHyperparameters is validated and applies from the next step', async () => {
  const fakes = fakeActivities();
  await withFakeWorkers(fakes, async () => {
    const spec = tinyRunSpec('pause');
    spec.stages.rewardModel.steps = 4;
    const handle = await start('pause', spec);
    await waitFor(async () => fakes.trained.length >= 1, 60_000, 'step 1');
    await handle.signal(pauseSignal);
    await waitFor(async () => (await handle.query(runStatusQuery)).stages.rewardModel?.phase === 'paused');
    const held = fakes.trained.length;
    await new Promise((r) => setTimeout(r, 1500));
    expect(fakes.trained.length).toBe(held);
    await expect(
      handle.executeUpdate(setHyperparametersUpdate, { args: [{ clip_low: 3 }] }),
    ).rejects.toThrow();
    expect(
      await handle.executeUpdate(setHyperparametersUpdate, { args: [{ learning_rate: 4e-3 }] }),
    ).toMatchObject({
      learning_rate: 4e-3,
      clip_low: 0.2,
    });
    await handle.signal(resumeSignal);
    expect(await handle.result()).toMatchObject({ state: 'done' });
    const rm = fakes.trained.filter((t) => t.adapter === 'rm-pause');
    expect(rm.map((t) => t.lr)).toEqual(rm.map((t) => (t.step <= held ? 1e-3 : 4e-3)));
  });
});

it('a blocked run with refused retries still takes cancel', async () => {
  const fakes = fakeActivities({ stage: 'rm', step: 1 });
  await withFakeWorkers(fakes, async () => {
    const handle = await start('blocked-cancel');
    await waitFor(async () => (await handle.query(runStatusQuery)).state === 'blocked', 60_000, 'the block');
    await expect(
      handle.executeUpdate(retryUpdate, { args: [{ hyperparameters: { clip_high: 20 } }] }),
    ).rejects.toThrow();
    await handle.signal(cancelSignal);
    expect(await handle.result()).toMatchObject({ state: 'cancelled' });
  });
});

it('cancel ends the run after the step in flight', async () => {
  const fakes = fakeActivities();
  await withFakeWorkers(fakes, async () => {
    const spec = tinyRunSpec('cancel');
    spec.stages.rewardModel.steps = 50;
    const handle = await start('cancel', spec);
    await waitFor(async () => fakes.trained.length >= 1, 60_000, 'step 1');
    await handle.signal(cancelSignal);
    const result = await handle.result();
    expect(result.state).toBe('cancelled');
    expect(result.stages.rewardModel?.phase).toBe('cancelled');
    expect(fakes.trained.every((t) => t.adapter === 'rm-cancel')).toBe(true);
    expect(fakes.trained.length).toBeLessThan(50);
  });
});
