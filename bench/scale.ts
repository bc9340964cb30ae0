/**
 * bench/scale: the orchestration of production-sized GRPO steps — 64 tasks × 16 samples, 1,024 episodes a
 * step — on the Temporal dev server, with activities that answer at once (no model, no database), so that
 * what is measured is Temporal alone: the real stage workflow, its activity calls on their queues, its
 * continue-as-new. Reports Temporal's seconds per step and per episode, workflow-task latency, and the
 * history events of every run of the stage (Temporal refuses a history past 51,200 events or 50 MB).
 * Target: ≤ 3 s of orchestration per 1,024-episode step (5 % of a one-minute GPU step) on 2 cores.
 * Writes bench/results/scale.json.
 *
 *   make bench-scale
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { temporal } from '@temporalio/proto';
import { createCpuActivities } from '../src/activities/cpu';
import type { Activities } from '../src/activities';
import { loadConfig } from '../src/config';
import { gpuHostQueue, TASK_QUEUES, type EvaluationResult } from '../src/contract';
import type { GroupInput, SampleRef } from '../src/grpo/env';
import { stageInput } from '../src/grpo/stage';
import type { StepCalls } from '../src/grpo/step';
import { repoRoot } from '../src/paths';
import { loadRunSpec } from '../src/runSpec';
import { startTemporal, stopTemporal } from '../src/stack/temporal';
import { grpoStage } from '../src/workflows/grpoStage';
import { mulberry32, percentile, writeResult } from './util';

const TASKS = 64;
const GROUP = 16;
const STEPS = Number(process.env.SCALE_STEPS ?? 30);
const TARGET_SECONDS_PER_STEP = 3;
const HISTORY_EVENT_LIMIT = 51_200;
const HISTORY_BYTES_LIMIT = 50 * 2 ** 20;

type Input<K extends keyof StepCalls> = Parameters<StepCalls[K]>[0];
const EventType = temporal.api.enums.v1.EventType;

/** Activities with the real names, queues and payload shapes, answering at once. */
function instantActivities(stepSeconds: number[]) {
  const random = mulberry32(7);
  let nextSample = 0;
  // computeAdvantages is the real one: it reads neither the store nor an environment.
  const real = createCpuActivities(undefined as never, undefined as never);
  return {
    cpu: {
      sampleTasks: async (i: Input<'sampleTasks'>) =>
        Array.from({ length: i.count }, (_, k) => `task-${i.step}-${i.offset + k}`),
      computeAdvantages: real.computeAdvantages,
      recordAdapterVersion: async () => {},
      recordStepMetrics: async (i: Input<'recordStepMetrics'>) =>
        void stepSeconds.push(i.metrics['time/step_s']),
    },
    rollout: {
      rolloutGroup: async (g: GroupInput): Promise<SampleRef[]> =>
        Array.from({ length: g.groupSize }, () => ({ kind: 'trajectory' as const, id: nextSample++ })),
      evaluate: async (i: { label: string; kind: EvaluationResult['kind']; model: string }) => ({
        label: i.label,
        kind: i.kind,
        model: i.model,
        metrics: {},
      }),
    },
    judge: {
      // Rewards that vary within a group, so that every group is kept and every sample has an advantage.
      rewardGroup: async (g: Input<'rewardGroup'>) => ({
        taskId: g.taskId,
        samples: g.samples,
        rewards_G: g.samples.map(() => random()),
        success_G: g.samples.map(() => 0),
        failed_G: g.samples.map(() => 0),
      }),
    },
    gpu: { gpuHost: async () => gpuHostQueue('bench') },
    gpuHost: {
      trainStep: async (i: Input<'trainStep'>) => ({
        adapter: i.adapter,
        step: i.step,
        loss: 0,
        clip_fraction: 0,
        approx_kl_old: 0,
        mismatch_kl: 0,
        is_weight_mean: 0,
        is_capped_fraction: 0,
        kl_ref: 0,
        entropy: 0,
        grad_norm: 0,
        update_norm: 0,
        no_signal: false,
        tokens: i.advantages.length,
        seconds: 0,
        learning_rate: i.hyperparameters.learning_rate,
        checkpoint: `${i.adapter}@step-${i.step}`,
        sha256: '0'.repeat(64),
        cached: false,
      }),
    },
  } satisfies { [Q in keyof Activities]: Partial<Activities[Q]> };
}

const millis = (t: temporal.api.history.v1.IHistoryEvent) =>
  Number(t.eventTime?.seconds ?? 0) * 1000 + Math.round((t.eventTime?.nanos ?? 0) / 1e6);

/** Every run of a workflow id, following continue-as-new from the first run: its history's events and size. */
async function histories(client: Client, workflowId: string, firstRunId: string) {
  const runs: { events: temporal.api.history.v1.IHistoryEvent[]; bytes: number }[] = [];
  for (let runId: string | null | undefined = firstRunId; runId;) {
    const history: temporal.api.history.v1.IHistory = await client.workflow
      .getHandle(workflowId, runId)
      .fetchHistory();
    const events = history.events ?? [];
    runs.push({ events, bytes: temporal.api.history.v1.History.encode(history).finish().length });
    runId = events.at(-1)?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId;
  }
  return runs;
}

/** Schedule-to-completion of each workflow task (queueing on the workflows queue plus the worker's run). */
function workflowTaskLatencies(events: temporal.api.history.v1.IHistoryEvent[]): number[] {
  const scheduled = new Map<number, number>();
  const latencies: number[] = [];
  for (const e of events) {
    if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)
      scheduled.set(Number(e.eventId), millis(e));
    const done = e.workflowTaskCompletedEventAttributes;
    if (done) latencies.push(millis(e) - scheduled.get(Number(done.scheduledEventId))!);
  }
  return latencies;
}

async function main() {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'evalrl-bench-scale-'));
  const config = loadConfig({
    ...process.env,
    EVALRL_DATA_DIR: work,
    EVALRL_TEMPORAL_PORT: '37633',
    EVALRL_TEMPORAL_UI_PORT: '38633',
    TEMPORAL_ADDRESS: undefined,
  });
  await startTemporal(config);
  const stepSeconds: number[] = [];
  try {
    const spec = loadRunSpec(path.join(repoRoot(), 'examples', 'production.yaml'));
    const input = {
      ...stageInput(spec, 'bench-scale', 'policy'),
      steps: STEPS,
      startStep: 1,
      tasksPerStep: TASKS,
      groupSize: GROUP,
    };
    console.log(
      `bench/scale: ${STEPS} GRPO steps of ${TASKS} tasks × ${GROUP} samples (${TASKS * GROUP} episodes each), instant activities, continue-as-new every ${input.continueAsNewEverySteps} steps`,
    );
    const connection = await NativeConnection.connect({ address: config.temporal.address });
    const activities = instantActivities(stepSeconds);
    const base = { connection, namespace: config.temporal.namespace };
    const workers = await Promise.all([
      Worker.create({
        ...base,
        taskQueue: TASK_QUEUES.workflows,
        workflowsPath: require.resolve('../src/workflows'),
      }),
      Worker.create({ ...base, taskQueue: TASK_QUEUES.cpu, activities: activities.cpu }),
      Worker.create({ ...base, taskQueue: TASK_QUEUES.rollout, activities: activities.rollout }),
      Worker.create({ ...base, taskQueue: TASK_QUEUES.judge, activities: activities.judge }),
      Worker.create({ ...base, taskQueue: TASK_QUEUES.gpu, activities: activities.gpu }),
      Worker.create({ ...base, taskQueue: gpuHostQueue('bench'), activities: activities.gpuHost }),
    ]);
    const running = workers.map((w) => w.run());
    const clientConnection = await Connection.connect({ address: config.temporal.address });
    const client = new Client({ connection: clientConnection, namespace: config.temporal.namespace });
    const started = Date.now();
    const handle = await client.workflow.start(grpoStage, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: input.runId,
      args: [input],
    });
    await handle.result();
    const wall = (Date.now() - started) / 1000;
    const runs = await histories(client, input.runId, handle.firstExecutionRunId);
    workers.forEach((w) => w.shutdown());
    await Promise.all(running);
    await clientConnection.close();

    // Step 1 includes the worker's first workflow task (bundle load): the steady state is what a run lives in.
    const steady = stepSeconds.slice(1);
    const perStep = steady.reduce((a, b) => a + b, 0) / steady.length;
    const latencies = runs.flatMap((r) => workflowTaskLatencies(r.events));
    const maxEvents = Math.max(...runs.map((r) => r.events.length));
    const maxBytes = Math.max(...runs.map((r) => r.bytes));
    const eventsPerStep = runs.reduce((a, r) => a + r.events.length, 0) / STEPS;
    console.log(
      `Temporal per ${TASKS * GROUP}-episode step: ${perStep.toFixed(2)} s (target ≤ ${TARGET_SECONDS_PER_STEP} s, ratio ${(perStep / TARGET_SECONDS_PER_STEP).toFixed(2)}); ${((1000 * perStep) / (TASKS * GROUP)).toFixed(2)} ms per episode`,
    );
    console.log(
      `workflow tasks: ${latencies.length}, latency p50 ${percentile(latencies, 50)} ms, p95 ${percentile(latencies, 95)} ms`,
    );
    console.log(
      `histories: ${runs.length} runs, ${eventsPerStep.toFixed(0)} events per step, largest ${maxEvents} events (limit ${HISTORY_EVENT_LIMIT}), ${(maxBytes / 2 ** 20).toFixed(2)} MiB (limit 50)`,
    );
    if (maxEvents > HISTORY_EVENT_LIMIT || maxBytes > HISTORY_BYTES_LIMIT)
      throw new Error('a history passed Temporal limits: continue-as-new must come sooner');
    writeResult('scale', {
      episodes_per_step: TASKS * GROUP,
      steps: STEPS,
      temporal_seconds_per_step: perStep,
      ms_per_episode: (1000 * perStep) / (TASKS * GROUP),
      max_history_events: maxEvents,
      max_history_mib: maxBytes / 2 ** 20,
      history_events_per_step: eventsPerStep,
      workflow_task_latency_ms: { p50: percentile(latencies, 50), p95: percentile(latencies, 95) },
      seconds_per_step: stepSeconds,
      wall_seconds: wall,
      target_seconds_per_step: TARGET_SECONDS_PER_STEP,
      ratio_vs_target: perStep / TARGET_SECONDS_PER_STEP,
      continue_as_new_every_steps: input.continueAsNewEverySteps,
      setup: 'Temporal dev server on this machine (2 cores), one worker process for every queue',
    });
  } finally {
    await stopTemporal(config);
    fs.rmSync(work, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
