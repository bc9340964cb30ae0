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

/**
 * Runs an activity's sampling with its hooks: a heartbeat after every model call (with the calls so far) and at
 * a third of the heartbeat timeout in between — one model call may outlast the timeout (its own timeout
 * bounds it), while a dead worker still stops beating — and the activity's cancellation.
 */
export async function withSampleHooks<T>(work: (hooks: SampleHooks) => Promise<T>): Promise<T> {
  const context = Context.current();
  // Every concurrent model call of the activity listens for its cancellation: dozens at once is by design.
  setMaxListeners(1000, context.cancellationSignal);
  let turns = 0;
  const beat = () => context.heartbeat({ turns });
  const timeout = context.info.heartbeatTimeoutMs;
  const keepAlive = timeout ? setInterval(beat, Math.max(1000, timeout / 3)) : undefined;
  try {
    return await work({
      onTurn: () => {
        turns++;
        beat();
      },
      signal: context.cancellationSignal,
    });
  } finally {
    clearInterval(keepAlive);
  }
}
