import { NativeConnection, Worker } from '@temporalio/worker';
import type pg from 'pg';
import type { Config } from '../config';
import { createActivities } from '../activities';
import { TASK_QUEUES } from '../taskQueues';

export type WorkerQueue = 'workflows' | 'cpu';

/** Creates the workers for the given queues on one connection; run them with `Promise.all(w.map(x => x.run()))`. */
export async function createWorkers(config: Config, pool: pg.Pool, queues: WorkerQueue[]): Promise<Worker[]> {
  const connection = await NativeConnection.connect({ address: config.temporal.address });
  const activities = createActivities(pool);
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
