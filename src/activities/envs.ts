import { setMaxListeners } from 'node:events';
import { Context } from '@temporalio/activity';
import type { Env, EnvConfig, EnvKind, SampleHooks } from '../grpo/env';
import type { EnvDeps } from '../env/episodes';
import { createPolicyEnv } from '../env/policyEnv';
import { createRewardModelEnv } from '../env/rewardModelEnv';
import { createWarmStartEnv } from '../env/warmStartEnv';

/** Every environment, by kind: the engine's activities look an environment up here, never branch on it. */
export function createEnvs(deps: EnvDeps) {
  const envs: { [K in EnvKind]: Env<Extract<EnvConfig, { kind: K }>> } = {
    policy: createPolicyEnv(deps),
    rewardModel: createRewardModelEnv(deps),
    warmStart: createWarmStartEnv(deps),
  };
  return <C extends EnvConfig>(config: C) => envs[config.kind] as unknown as Env<C>;
}

/** An activity's hooks for the samples it makes: a heartbeat after every model call, and its cancellation. */
export function activityHooks(progress: () => object = () => ({})): SampleHooks {
  const context = Context.current();
  // Every concurrent model call of the activity listens for its cancellation: dozens at once is by design.
  setMaxListeners(1000, context.cancellationSignal);
  return { onTurn: () => context.heartbeat(progress()), signal: context.cancellationSignal };
}
