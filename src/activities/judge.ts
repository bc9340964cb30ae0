import type { StageInput } from '../contract';
import type { GroupInput, SampleRef, ScoredGroup } from '../grpo/env';
import { activityHooks, type createEnvs } from './envs';
import { classified } from './failures';

/** The evalrl-judge queue: rewarding samples (the reward model's judgements, teacher labels). */
export function createJudgeActivities(envOf: ReturnType<typeof createEnvs>) {
  return {
    rewardGroup: (input: GroupInput & { env: StageInput['env']; samples: SampleRef[] }) =>
      classified(async (): Promise<ScoredGroup> => {
        let turns = 0;
        const rewards = await envOf(input.env).reward(
          input.env,
          input,
          input.samples,
          activityHooks(() => ({ turns: ++turns })),
        );
        return { taskId: input.taskId, samples: input.samples, ...rewards };
      }),
  };
}
