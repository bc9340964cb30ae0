import type { EvaluationResult, StageInput } from '../contract';
import type { EvaluationInput, GroupInput } from '../grpo/env';
import { prepareCandidates, type CandidatesInput } from '../env/rewardModelData';
import type { EnvDeps } from '../env/episodes';
import { withSampleHooks, type createEnvs } from './envs';
import { classified } from './failures';

export type EvaluateInput = EvaluationInput & { env: StageInput['env']; kind: EvaluationResult['kind'] };

/** The evalrl-rollout queue: sampling the model being trained or evaluated (episodes, judgements). */
export function createRolloutActivities(deps: EnvDeps, envOf: ReturnType<typeof createEnvs>) {
  return {
    /** A group of samples of one task, each stored once under its key (a retry finds the stored ones). */
    rolloutGroup: (input: GroupInput & { env: StageInput['env'] }) =>
      classified(() => withSampleHooks((hooks) => envOf(input.env).rollout(input.env, input, hooks))),

    /** The reward model's labelled candidates of a split (see src/env/rewardModelData.ts). */
    prepareCandidates: (input: CandidatesInput) =>
      classified(() => withSampleHooks((hooks) => prepareCandidates(deps, input, hooks))),

    /** The environment's evaluation of a model on held-out tasks; stored with the run. */
    evaluate: (input: EvaluateInput) =>
      classified(async (): Promise<EvaluationResult> => {
        const metrics = await withSampleHooks((hooks) => envOf(input.env).evaluate(input.env, input, hooks));
        const result = { label: input.label, kind: input.kind, model: input.model, metrics };
        await deps.store.runs.recordEvaluation(input.runId, input.split, result);
        return result;
      }),
  };
}
