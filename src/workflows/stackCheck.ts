import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { TASK_QUEUES } from '../contract';

const { recordStackCheck } = proxyActivities<Activities['cpu']>({
  taskQueue: TASK_QUEUES.cpu,
  startToCloseTimeout: '30 seconds',
});

/** The smallest real workflow: one activity on the CPU queue, through PostgreSQL. */
export async function stackCheck(message: string): Promise<{ workflowId: string; stored: string }> {
  return recordStackCheck(workflowInfo().workflowId, message);
}
