import OpenAI from 'openai';
import type pg from 'pg';
import type { Config } from '../config';
import { ModelServerClient } from '../modelServer/client';
import { loadVersion, publishStep } from '../modelServer/publish';
import { createSamplerPool } from '../modelServer/samplerPool';
import { paths } from '../paths';
import { loadSkills } from '../reward/skills';
import { availableVerifiers } from '../reward/verifiers';
import { createStore } from '../store';
import { createCpuActivities } from './cpu';
import { createEnvs } from './envs';
import { createGpuActivities } from './gpu';
import { createJudgeActivities } from './judge';
import { createRolloutActivities } from './rollout';

/** Activities by task queue; each worker registers the family of its queue. */
export function createActivities(pool: pg.Pool, config: Config) {
  const { url, token } = config.modelServer;
  const store = createStore(pool);
  const modelServer = new ModelServerClient({ url, token });
  // A sampler that restarted has forgotten the versions published to it: they are loaded again on demand.
  const republish = async (url: string, model: string) => {
    const [adapter, step] = model.split('@step-');
    const checkpoint = await store.runs.adapterCheckpoint(adapter, Number(step));
    if (checkpoint) await loadVersion(url, token, model, checkpoint);
    return checkpoint !== undefined;
  };
  const samplers = config.samplingServers && createSamplerPool(config.samplingServers, { token, republish });
  const deps = {
    store,
    llm: new OpenAI({
      baseURL: `${url}/v1`,
      apiKey: token ?? 'unused',
      maxRetries: 0,
      fetch: samplers?.fetch,
    }),
    modelServer,
    skills: loadSkills(paths.skills(), availableVerifiers(true), availableVerifiers(false)),
    teacher: config.teacher,
  };
  const envOf = createEnvs(deps);
  const gpu = createGpuActivities(store, modelServer, config.gpuHost);
  return {
    cpu: createCpuActivities(
      store,
      envOf,
      config.samplingServers && ((v) => publishStep(config.samplingServers!, token, v)),
    ),
    rollout: createRolloutActivities(deps, envOf),
    judge: createJudgeActivities(envOf),
    gpu: { gpuHost: gpu.gpuHost },
    gpuHost: { trainStep: gpu.trainStep },
  };
}

export type Activities = ReturnType<typeof createActivities>;
