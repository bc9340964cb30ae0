import { executeChild } from '@temporalio/workflow';
import type { RunSpec } from '../runSpec';
import { TASK_QUEUES } from '../taskQueues';
import type { EvaluationResult } from './messages';
import { trainingRun } from './trainingRun';

export interface LadderRow {
  policy: string;
  run: string;
  successRate: number;
  /** Standard error of the success rate over the evaluation questions. */
  standardError: number;
  questions: number;
}

/**
 * The seed's experiment: task success of the base policy, of the policy trained with the untrained reward
 * model, and of the policy trained with the RL-trained reward model — two runs from the same seed and data,
 * started together; the reward-model stage runs once, in the second.
 */
export async function experimentLadder({ experimentId, spec }: { experimentId: string; spec: RunSpec }) {
  // Adapters of their own per experiment (an adapter belongs to one run): the variant and the id's tail.
  const adapter = (name: string, tag: string) => `${name}-${tag}-${experimentId.slice(-20)}`.slice(0, 64);
  const variant = (tag: string, rewardModelStage: boolean): RunSpec => ({
    ...spec,
    name: `${spec.name}-${tag}`,
    models: {
      policy: { ...spec.models.policy, adapter: adapter(spec.models.policy.adapter, tag) },
      rewardModel: { ...spec.models.rewardModel, adapter: adapter(spec.models.rewardModel.adapter, tag) },
    },
    stages: { ...spec.stages, rewardModel: { ...spec.stages.rewardModel, enabled: rewardModelStage } },
  });
  const run = (tag: string, rewardModelStage: boolean) =>
    executeChild(trainingRun, {
      workflowId: `${experimentId}/${tag}`,
      taskQueue: TASK_QUEUES.workflows,
      args: [{ runId: `${experimentId}/${tag}`, spec: variant(tag, rewardModelStage) }],
    });
  const [untrained, trained] = await Promise.all([run('untrained-rm', false), run('trained-rm', true)]);
  const final = (evaluations: EvaluationResult[]) =>
    evaluations.filter((e) => e.kind === 'policy' && e.label !== 'policy:base').at(-1);
  const row = (policy: string, runId: string, e: EvaluationResult | undefined): LadderRow => {
    const p = e?.metrics.successRate ?? 0;
    const n = e?.metrics.episodes ?? 0;
    return {
      policy,
      run: runId,
      successRate: p,
      standardError: n ? Math.sqrt((p * (1 - p)) / n) : 0,
      questions: n,
    };
  };
  return {
    experimentId,
    rows: [
      row(
        'base policy',
        trained.runId,
        trained.evaluations.find((e) => e.label === 'policy:base'),
      ),
      row('trained with the untrained reward model', untrained.runId, final(untrained.evaluations)),
      row('trained with the RL-trained reward model', trained.runId, final(trained.evaluations)),
    ],
  };
}
