import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { TASK_QUEUES, type ActivityBudget } from '../contract';

/**
 * The activity stubs of each queue, with the run's retry budget and heartbeat timeout. Activities that call
 * models heartbeat after every model call; short bookkeeping ones only have a start-to-close timeout.
 */
export function activityProxies(budget: ActivityBudget) {
  const retry = {
    maximumAttempts: budget.maximumAttempts,
    initialInterval: '1 second',
    maximumInterval: '30 seconds',
  };
  const heartbeatTimeout = `${budget.heartbeatTimeoutSeconds} seconds`;
  return {
    cpu: proxyActivities<Activities['cpu']>({
      taskQueue: TASK_QUEUES.cpu,
      startToCloseTimeout: '5 minutes',
      retry,
    }),
    rollout: proxyActivities<Activities['rollout']>({
      taskQueue: TASK_QUEUES.rollout,
      startToCloseTimeout: '6 hours', // a group of episodes, or an evaluation, on a CPU model server is slow
      heartbeatTimeout,
      retry,
    }),
    judge: proxyActivities<Activities['judge']>({
      taskQueue: TASK_QUEUES.judge,
      startToCloseTimeout: '2 hours',
      heartbeatTimeout,
      retry,
    }),
    gpu: proxyActivities<Activities['gpu']>({
      taskQueue: TASK_QUEUES.gpu,
      startToCloseTimeout: '1 minute',
      retry,
    }),
    /** Train on the host whose model server holds the adapter; a host that takes no work in time is gone. */
    host: (taskQueue: string) =>
      proxyActivities<Activities['gpuHost']>({
        taskQueue,
        scheduleToStartTimeout: heartbeatTimeout,
        startToCloseTimeout: '4 hours',
        heartbeatTimeout,
        retry,
      }),
  };
}
