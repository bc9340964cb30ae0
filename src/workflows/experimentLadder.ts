import { condition, patched, setHandler, startChild } from '@temporalio/workflow';
import { TASK_QUEUES, warmStartsDoneSignal, type EvaluationResult, type RunStatus } from '../contract';
import { initialCheckpoint, untrainedJudge } from '../grpo/stage';
import type { RunSpec } from '../runSpec';
import type { JudgeComparison } from '../store/judgements';
import { activityProxies } from './proxies';
import { trainingRun } from './trainingRun';

/** The ladder's two runs: everything (the trained reward model judges), then the policy stage judged by the untrained one. */
export const ladderRuns = (experimentId: string) => ({
  trained: `${experimentId}/trained-rm`,
  untrained: `${experimentId}/untrained-rm`,
});

export interface LadderRow {
  success: number;
  /** Standard error of the success rate over the evaluation questions. */
  se: number;
  n: number;
  run: string;
  evaluation: string;
}

export interface LadderResult {
  experimentId: string;
  rows: {
    base: LadderRow | null;
    warm_start: LadderRow | null;
    rl_untrained_rm: LadderRow | null;
    rl_trained_rm: LadderRow | null;
  };
  rm_agreement: {
    untrained: number | null;
    untrained_se: number | null;
    trained: number | null;
    trained_se: number | null;
    n: number | null;
  };
  /** The two judges on the policy episodes both runs sampled alike: if none differ, neither do the GRPO rows. */
  judges: JudgeComparison | null;
  questions: number;
}

/**
 * The seed's experiment, on the same held-out questions: the base policy, its warm start, GRPO with the
 * untrained reward model (the judge before its GRPO stage), and GRPO with the GRPO-trained reward model; plus
 * the reward model's held-out agreement before and after its stage. Two runs: the first does everything
 * (warm starts, reward-model stage, policy stage judged by the trained reward model); the second only trains
 * the policy, from the first's warm start with the same seed and questions, judged by the untrained judge —
 * so the two GRPO rows differ only in their judge.
 */
export async function experimentLadder({
  experimentId,
  spec,
}: {
  experimentId: string;
  spec: RunSpec;
}): Promise<LadderResult> {
  // Adapters of their own per experiment (an adapter belongs to one run): the variant and the id's tail.
  const adapter = (name: string, tag: string) => `${name}-${tag}-${experimentId.slice(-12)}`.slice(0, 58);
  const withAdapters = (s: RunSpec, tag: string): RunSpec => ({
    ...s,
    name: `${spec.name}-${tag}`,
    models: {
      policy: { ...s.models.policy, adapter: adapter(spec.models.policy.adapter, tag) },
      rewardModel: { ...s.models.rewardModel, adapter: adapter(spec.models.rewardModel.adapter, tag) },
    },
  });
  const full = withAdapters(spec, 'trm');
  const policyOnly = withAdapters(
    {
      ...spec,
      models: {
        ...spec.models,
        policy: { ...spec.models.policy, initFrom: initialCheckpoint(full, 'policy') },
      },
      judge: { ...spec.judge, model: untrainedJudge(full) },
      stages: {
        ...spec.stages,
        policyWarmStart: { ...spec.stages.policyWarmStart, enabled: false },
        judgeWarmStart: { ...spec.stages.judgeWarmStart, enabled: false },
        rewardModel: { ...spec.stages.rewardModel, enabled: false },
      },
      evaluation: { ...spec.evaluation, baseline: false },
    },
    'urm',
  );
  const ids = ladderRuns(experimentId);
  let warmStartsDone = false;
  setHandler(warmStartsDoneSignal, () => void (warmStartsDone = true));
  const run = async (runId: string, s: RunSpec) =>
    (
      await startChild(trainingRun, {
        workflowId: runId,
        taskQueue: TASK_QUEUES.workflows,
        args: [{ runId, spec: s }],
      })
    ).result();
  const trainedRun = run(ids.trained, full);
  // The second run needs only the first's warm starts: it trains beside the first's reward-model stage.
  if (patched('ladder-runs-overlap')) await Promise.race([condition(() => warmStartsDone), trainedRun]);
  else await trainedRun;
  const untrained = await run(ids.untrained, policyOnly);
  const trained = await trainedRun;

  const find = (r: RunStatus, label: (l: string) => boolean) =>
    r.evaluations.filter((e) => label(e.label)).at(-1);
  const row = (r: RunStatus, e: EvaluationResult | undefined): LadderRow | null =>
    e
      ? {
          success: e.metrics.successRate,
          se: e.metrics.successSe,
          n: e.metrics.episodes,
          run: r.runId,
          evaluation: e.label,
        }
      : null;
  const rmBefore = find(trained, (l) => l.startsWith('judgeWarmStart:') || l === 'rewardModel:untrained');
  const rmAfter = find(trained, (l) => l.startsWith('rewardModel:step-'));
  const judges = patched('ladder-compares-judges')
    ? await activityProxies(spec.activities).cpu.compareJudges({ runs: [ids.trained, ids.untrained] })
    : null;
  return {
    experimentId,
    rows: {
      base: row(
        trained,
        find(trained, (l) => l === 'policy:base'),
      ),
      warm_start: row(
        trained,
        find(trained, (l) => l.startsWith('policyWarmStart:')),
      ),
      rl_untrained_rm: row(
        untrained,
        find(untrained, (l) => l.startsWith('policy:step-')),
      ),
      rl_trained_rm: row(
        trained,
        find(trained, (l) => l.startsWith('policy:step-')),
      ),
    },
    rm_agreement: {
      untrained: rmBefore?.metrics.agreement ?? null,
      untrained_se: rmBefore?.metrics.agreementSe ?? null,
      trained: rmAfter?.metrics.agreement ?? null,
      trained_se: rmAfter?.metrics.agreementSe ?? null,
      n: rmAfter?.metrics.judgements ?? rmBefore?.metrics.judgements ?? null,
    },
    judges,
    questions: spec.evaluation.questions,
  };
}
