import { isDeepStrictEqual } from 'node:util';
import { log } from '@temporalio/activity';
import { groupAdvantages } from '../grpo/advantages';
import { selectGroups } from '../grpo/dynamicSampling';
import { epochBatch, sampleTasks } from '../grpo/sampleTasks';
import type { StepCalls } from '../grpo/step';
import type { Publication } from '../modelServer/publish';
import { stageAdapter } from '../grpo/stage';
import { STAGE_NAMES } from '../contract';
import { DataError } from '../env/episodes';
import { parseRunSpec } from '../runSpec';
import type { Store } from '../store';
import type { createEnvs } from './envs';
import { classified } from './failures';

type Input<K extends keyof StepCalls> = Parameters<StepCalls[K]>[0];

/**
 * The evalrl-cpu queue: registering runs, choosing tasks, advantages, bookkeeping. No model calls; with a
 * sampling pool, `publish` hands each trained step to its servers.
 */
export function createCpuActivities(
  store: Store,
  envOf: ReturnType<typeof createEnvs>,
  publish?: (v: { adapter: string; step: number; checkpoint: string }) => Promise<Publication>,
) {
  return {
    /**
     * Validates the spec again (a run started by hand is refused too), records the run and claims its
     * adapter names: an adapter another run trained is refused, never continued or overwritten. A run id
     * that exists with another spec is refused: a resume must be of the same run.
     */
    registerRun: (input: { runId: string; spec: unknown }) =>
      classified(async () => {
        const spec = parseRunSpec(input.spec, `run ${input.runId}`);
        const stored = await store.runs.insertRun(input.runId, spec);
        if (!isDeepStrictEqual(stored, JSON.parse(JSON.stringify(spec))))
          throw new DataError(
            `run ${input.runId} already exists with another spec; start a new run (another --id)`,
          );
        for (const stage of STAGE_NAMES.filter((s) => spec.stages[s].enabled)) {
          const adapter = stageAdapter(spec, stage);
          const owner = await store.runs.claimAdapter(adapter, input.runId, stage);
          if (owner.runId !== input.runId || owner.stage !== stage)
            throw new DataError(
              `models: adapter "${adapter}" belongs to run ${owner.runId} (${owner.stage}); give this run its own adapter names`,
            );
        }
        const counts = await store.questions.questionCounts();
        if (counts.train === 0 || counts.test === 0)
          throw new DataError(
            `questions: ${counts.train} train and ${counts.test} test questions; run \`evalrl ingest\` and \`evalrl questions generate\` first`,
          );
      }),

    sampleTasks: (input: Input<'sampleTasks'>) =>
      classified(async () => {
        const env = envOf(input.env);
        const ids = await env.taskIds(input.env, input.runId, 'train');
        if (ids.length === 0)
          throw new DataError(
            `stage ${input.stage} of run ${input.runId} has no training tasks (${input.env.kind})`,
          );
        if (input.objective === 'sft')
          return epochBatch(ids, input.seed, input.stage, input.step, input.count);
        const strata = await env.taskStrata?.(input.env, input.runId, 'train');
        return sampleTasks(ids, input.seed, input.stage, input.step, input.count, {
          offset: input.offset,
          stratum: strata && ((taskId) => strata.get(taskId) ?? ''),
        });
      }),

    /**
     * Group-relative advantages with dynamic sampling (supervised stages: advantage 1 for every sample). When
     * every group was dropped the step still trains, on all groups at advantage 0, so that the step sequence
     * stays whole.
     */
    async computeAdvantages(input: Input<'computeAdvantages'>) {
      const groups = input.groups.filter((g) => g.samples.length > 0);
      if (input.objective === 'sft')
        return {
          advantages: groups.flatMap((g) => g.samples.map((sample) => ({ sample, advantage: 1 }))),
          kept: groups.map((g) => g.taskId),
          dropped: [],
          missing: 0,
        };
      const { kept, dropped, missing } = selectGroups(
        groups,
        input.wanted,
        input.dynamicSampling.minStd,
        input.dynamicSampling.enabled,
      );
      const advantages =
        kept.length > 0
          ? kept.flatMap((g) => {
              const adv = groupAdvantages(g.rewards_G, input.divideByStd);
              return g.samples.map((sample, i) => ({ sample, advantage: adv[i] }));
            })
          : groups.flatMap((g) => g.samples.map((sample) => ({ sample, advantage: 0 })));
      return { advantages, kept: kept.map((g) => g.taskId), dropped, missing };
    },

    recordStepMetrics: (input: Input<'recordStepMetrics'>) =>
      store.runs.recordStepMetrics(input.runId, input.stage, input.step, input.metrics),

    /** Records the step's adapter version (what evaluation and reports read) and publishes it to the samplers. */
    recordAdapterVersion: async (input: Input<'recordAdapterVersion'>) => {
      await store.runs.recordAdapterVersion(input);
      const publication = await publish?.(input);
      if (publication?.failed.length)
        log.warn(
          `published ${publication.address} to ${publication.published.length} of ${publication.published.length + publication.failed.length} sampling servers`,
          { failed: publication.failed },
        );
    },

    /** Where a (re)started stage continues: after the last step whose metrics were recorded. */
    nextStep: async (input: { runId: string; stage: string }) =>
      (await store.runs.lastRecordedStep(input.runId, input.stage)) + 1,

    /** How a ladder's two judges scored the policy episodes its two runs sampled alike. */
    compareJudges: (input: { runs: [string, string] }) => store.judgements.compareJudges(...input.runs),

    /** Proves the activity path end to end: a CPU-queue activity writing to and reading from PostgreSQL. */
    recordStackCheck: async (workflowId: string, message: string) => ({
      workflowId,
      stored: await store.runs.recordStackCheck(workflowId, message),
    }),
  };
}
