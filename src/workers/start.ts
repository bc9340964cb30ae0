import { NativeConnection, Worker } from '@temporalio/worker';
import type pg from 'pg';
import type { Config } from '../config';
import { createActivities } from '../activities';
import { gpuHostQueue, TASK_QUEUES } from '../contract';
import { temporalConnectionOptions } from '../temporalConnection';
import { workflowCode } from './workflowBundle';

export const WORKER_QUEUES = ['workflows', 'cpu', 'rollout', 'judge', 'gpu'] as const;
export type WorkerQueue = (typeof WORKER_QUEUES)[number];

/**
 * Creates the workers for the given queues on one connection. A GPU worker polls the shared GPU queue
 * (which only answers "which host?") and its own host's queue, where train and publish run.
 */
export async function createWorkers(
  config: Config,
  pool: pg.Pool,
  queues: readonly WorkerQueue[],
): Promise<Worker[]> {
  const connection = await NativeConnection.connect(temporalConnectionOptions(config.temporal));
  const activities = createActivities(pool, config);
  const base = { connection, namespace: config.temporal.namespace };
  return Promise.all(
    queues.flatMap((queue) => {
      if (queue === 'workflows')
        return [Worker.create({ ...base, taskQueue: TASK_QUEUES.workflows, ...workflowCode() })];
      const worker = Worker.create({ ...base, taskQueue: TASK_QUEUES[queue], activities: activities[queue] });
      if (queue !== 'gpu') return [worker];
      return [
        worker,
        Worker.create({ ...base, taskQueue: gpuHostQueue(config.gpuHost), activities: activities.gpuHost }),
      ];
    }),
  );
}

/** Runs the workers until `work` settles, then shuts them down (and waits until they have stopped). */
export async function runWorkersUntil<T>(workers: Worker[], work: Promise<T>): Promise<T> {
  const running = workers.map((w) => w.run());
  try {
    return await work;
  } finally {
    workers.forEach((w) => w.shutdown());
    await Promise.all(running);
  }
}
