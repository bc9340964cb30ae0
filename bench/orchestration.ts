/**
 * bench/orchestration: the same GRPO steps of the demo's policy stage run (a) on Temporal, with one worker
 * process per task queue, and (b) as a plain in-process loop calling the same functions (grpoStep over the
 * same activity functions). Prints the wall-time ratio a/b and Temporal's share of each step. Target: ratio
 * ≤ 1.05 at the demo's step size. The model server runs in deterministic mode, so that both loops sample the
 * same tokens (seeds come from the run's seed and the sample's place, adapters start from the same weights)
 * and the difference is the orchestration. Writes bench/results/orchestration.json.
 *
 *   make bench-orchestration
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createActivities } from '../src/activities';
import { stageInput } from '../src/grpo/stage';
import { grpoStep, type StepCalls } from '../src/grpo/step';
import { repoRoot } from '../src/paths';
import { loadRunSpec } from '../src/runSpec';
import { TASK_QUEUES } from '../src/contract';
import { WORKER_QUEUES } from '../src/workers/start';
import { grpoStage } from '../src/workflows/grpoStage';
import { startBenchStack } from './benchStack';
import { writeResult } from './util';

const STEPS = 2;

async function main() {
  const stack = await startBenchStack(
    'orchestration',
    {
      EVALRL_PG_PORT: '36533',
      EVALRL_TEMPORAL_PORT: '37533',
      EVALRL_TEMPORAL_UI_PORT: '38533',
      EVALRL_MODEL_SERVER_URL: 'http://127.0.0.1:18126',
    },
    // Deterministic mode: both loops sample the very same tokens, so they do the same work.
    { temporal: true, modelServer: { mode: 'deterministic', threads: 2 } },
  );
  const { config, pool } = stack;
  const spec = loadRunSpec(path.join(repoRoot(), 'examples', 'demo.yaml'));
  const workers: ChildProcess[] = [];
  try {
    const input = (adapter: string) => ({
      ...stageInput(spec, `bench-${adapter}`, 'policy'),
      adapter,
      steps: STEPS,
      startStep: 1,
    });
    console.log(
      `bench/orchestration: ${STEPS} policy steps of the demo spec (${spec.stages.policy.tasksPerStep} tasks × ${spec.stages.policy.groupSize} samples, judged), SmolLM2-135M on CPU`,
    );

    // (b) The plain loop: the same activity functions, called in process.
    const activities = createActivities(pool, config);
    const context = new MockActivityEnvironment();
    const local =
      <I, O>(fn: (input: I) => Promise<O>) =>
      (i: I) =>
        context.run(fn, i) as Promise<O>;
    const calls: StepCalls = {
      sampleTasks: local(activities.cpu.sampleTasks),
      rolloutGroup: local(activities.rollout.rolloutGroup),
      rewardGroup: local(activities.judge.rewardGroup),
      computeAdvantages: local(activities.cpu.computeAdvantages),
      trainStep: local(activities.gpuHost.trainStep),
      recordAdapterVersion: local(activities.cpu.recordAdapterVersion),
      recordStepMetrics: local(activities.cpu.recordStepMetrics),
    };
    const plain = input('plain');
    for (let step = 1; step <= STEPS; step++) await grpoStep(calls, plain, step, plain.hyperparameters);

    // (a) Temporal: one worker process per queue, the stage as a workflow.
    const childEnv: NodeJS.ProcessEnv = { ...process.env, ...stack.env };
    delete childEnv.DATABASE_URL;
    delete childEnv.TEMPORAL_ADDRESS;
    for (const queue of WORKER_QUEUES)
      workers.push(
        spawn('node', [path.join(repoRoot(), 'dist/src/cli/main.js'), 'worker', '--queues', queue], {
          env: childEnv,
          stdio: ['ignore', 'ignore', 'inherit'],
        }),
      );
    const connection = await Connection.connect({ address: config.temporal.address });
    const client = new Client({ connection, namespace: config.temporal.namespace });
    const temporal = input('temporal');
    await client.workflow.execute(grpoStage, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: temporal.runId,
      args: [{ ...temporal, evaluation: { ...temporal.evaluation, everySteps: 1000 } }],
    });
    await connection.close();

    const { rows } = await pool.query<{ run_id: string; step: number; seconds: number }>(
      `SELECT run_id, step, (metrics->>'time/step_s')::float AS seconds FROM step_metrics
       WHERE run_id IN ('bench-plain', 'bench-temporal') ORDER BY step`,
    );
    const seconds = (run: string) => rows.filter((r) => r.run_id === run).map((r) => r.seconds);
    const a = seconds('bench-temporal');
    const b = seconds('bench-plain');
    const sum = (xs: number[]) => xs.reduce((s, x) => s + x, 0);
    const ratio = sum(a) / sum(b);
    const share = a.map((t, i) => Math.max(0, (t - b[i]) / t));
    a.forEach((t, i) =>
      console.log(
        `step ${i + 1}: temporal ${t.toFixed(2)} s, plain ${b[i].toFixed(2)} s, Temporal's share ${(100 * share[i]).toFixed(2)}%`,
      ),
    );
    console.log(`ratio temporal/plain: ${ratio.toFixed(3)} (target ≤ 1.05)`);
    writeResult('orchestration', {
      ratio,
      temporal_share: sum(share) / share.length,
      steps: STEPS,
      seconds_per_step: { temporal: a, plain: b },
      temporal_share_per_step: share,
      setup:
        'demo spec policy stage (examples/demo.yaml), SmolLM2-135M on CPU (2 threads, deterministic mode), one worker process per queue',
    });
  } finally {
    workers.forEach((w) => w.kill('SIGTERM'));
    await stack.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
