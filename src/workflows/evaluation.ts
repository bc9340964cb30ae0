import type { EvaluateInput } from '../activities/rollout';
import { activityProxies } from './proxies';

/** `evalrl eval ADAPTER`: one evaluation on the rollout workers, durable like everything else. */
export async function evaluation(input: EvaluateInput) {
  const { rollout } = activityProxies({ maximumAttempts: 5, heartbeatTimeoutSeconds: 300 });
  return rollout.evaluate(input);
}
