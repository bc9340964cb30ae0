/** One task queue per kind of work, so that each can be scaled and placed on its own hosts. */
export const TASK_QUEUES = {
  workflows: 'evalrl-workflows',
  rollout: 'evalrl-rollout',
  judge: 'evalrl-judge',
  cpu: 'evalrl-cpu',
  gpu: 'evalrl-gpu',
} as const;

export type QueueName = keyof typeof TASK_QUEUES;
