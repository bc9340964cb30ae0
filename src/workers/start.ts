import { NativeConnection, Worker } from '@temporalio/worker';
import type pg from 'pg';
import type { Config } from '../config';
import { createActivities } from '../activities';
import { TASK_QUEUES } from '../taskQueues';

export type WorkerQueue = 'workflows' | 'cpu' | 'rollout' | 'gpu';

/** Creates the workers for the given queues on one connection; run them with `Promise.all(w.map(x => x.run()))`. */
export async function createWorkers(config: Config, pool: pg.Pool, queues: WorkerQueue[]): Promise<Worker[]> {
  const connection = await NativeConnection.connect({ address: config.temporal.address });
  const activities = createActivities(pool, config);
  const namespace = config.temporal.namespace;
  return Promise.all(
    queues.map((queue) =>
      queue === 'workflows'
        ? Worker.create({
            connection,
            namespace,
            taskQueue: TASK_QUEUES.workflows,
            workflowsPath: require.resolve('../workflows'),
          })
        : Worker.create({
            connection,
            namespace,
            taskQueue: TASK_QUEUES[queue],
            activities: activities[queue],
          }),
    ),
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
