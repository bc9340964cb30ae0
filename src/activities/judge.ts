import type { StageInput } from '../contract';
import type { GroupInput, SampleRef, ScoredGroup } from '../grpo/env';
import { withSampleHooks, type createEnvs } from './envs';
import { classified } from './failures';

/** The evalrl-judge queue: rewarding samples (the reward model's judgements, teacher labels). */
export function createJudgeActivities(envOf: ReturnType<typeof createEnvs>) {
  return {
    rewardGroup: (input: GroupInput & { env: StageInput['env']; samples: SampleRef[] }) =>
      classified(async (): Promise<ScoredGroup> => {
        const rewards = await withSampleHooks((hooks) =>
          envOf(input.env).reward(input.env, input, input.samples, hooks),
        );
        return { taskId: input.taskId, samples: input.samples, ...rewards };
      }),
  };
}
