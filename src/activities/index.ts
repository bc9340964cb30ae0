import OpenAI from 'openai';
import type pg from 'pg';
import type { Config } from '../config';
import { ModelServerClient } from '../modelServer/client';
import { paths } from '../paths';
import { loadSkills } from '../reward/skills';
import { VERIFIERS } from '../reward/verifiers';
import { createGrpoStageActivities } from './grpoStage';
import { createStackCheckActivities } from './stackCheck';
import { createTrainingActivities } from './training';
import { createTrainingRunActivities } from './trainingRun';

/** Activities by task queue; each worker registers the families of its queue. */
export function createActivities(pool: pg.Pool, config: Config) {
  const { url, token } = config.modelServer;
  const llm = new OpenAI({ baseURL: `${url}/v1`, apiKey: token ?? 'unused', maxRetries: 0 });
  const deps = {
    pool,
    llm,
    skills: loadSkills(paths.skills(), Object.keys(VERIFIERS)),
    teacher: config.teacher,
  };
  const grpo = createGrpoStageActivities(deps);
  const run = createTrainingRunActivities(deps);
  const training = createTrainingActivities({
    pool,
    modelServer: new ModelServerClient({ url, token }),
    host: config.gpuHost,
  });
  return {
    cpu: {
      ...createStackCheckActivities(pool),
      registerRun: run.registerRun,
      sampleTasks: grpo.sampleTasks,
      computeAdvantages: grpo.computeAdvantages,
      recordStepMetrics: grpo.recordStepMetrics,
      nextStep: grpo.nextStep,
    },
    rollout: {
      rolloutGroup: grpo.rolloutGroup,
      prepareCandidates: run.prepareCandidates,
      evaluate: run.evaluate,
    },
    judge: { judgeGroup: grpo.judgeGroup },
    gpu: { gpuHost: training.gpuHost },
    gpuHost: { trainStep: training.trainStep, publishAdapter: training.publishAdapter },
  };
}

export type Activities = ReturnType<typeof createActivities>;
