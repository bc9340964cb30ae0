import OpenAI from 'openai';
import type pg from 'pg';
import type { Config } from '../config';
import { ModelServerClient } from '../modelServer/client';
import { createPolicyStageActivities } from './policyStage';
import { createStackCheckActivities } from './stackCheck';

/** Activities by task queue; each worker registers the families of its queue. */
export function createActivities(pool: pg.Pool, config: Config) {
  const { url, token } = config.modelServer;
  const llm = new OpenAI({ baseURL: `${url}/v1`, apiKey: token ?? 'unused', maxRetries: 0 });
  const policy = createPolicyStageActivities({
    pool,
    llm,
    modelServer: new ModelServerClient({ url, token }),
  });
  return {
    cpu: {
      ...createStackCheckActivities(pool),
      sampleTasks: policy.sampleTasks,
      computeAdvantages: policy.computeAdvantages,
      recordStepMetrics: policy.recordStepMetrics,
    },
    rollout: { rolloutGroup: policy.rolloutGroup },
    gpu: { trainStep: policy.trainStep },
  };
}
