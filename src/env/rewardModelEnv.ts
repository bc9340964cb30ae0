import pLimit from 'p-limit';
import type { Env, RewardModelEnvConfig, Split } from '../grpo/env';
import { evaluationTasks } from '../grpo/sampleTasks';
import { rmMetrics } from '../reward/evaluation';
import type { JudgeSettings } from '../reward/judge';
import type { StoredJudgement } from '../store/judgements';
import { DataError, episodeWithQuestion, judgementOnce, sampleSeed, type EnvDeps } from './episodes';
import { EVALUATION_CONCURRENCY } from './policyEnv';
import { balancedTasks } from './rewardModelData';

/**
 * A judgement's reward: agreement with the label, 1 − |score − label|, for a verdict. A judgement that reached
 * none scores below every verdict — −0.5 when it still used the tools (loaded a skill, ran a verifier), −1 when
 * it made no valid call — so that a judge that rarely finishes still has a gradient towards the procedure
 * (as the policy's malformed < wrong < right), instead of every failure tying with the worst verdict.
 */
export function judgementReward(j: StoredJudgement | null, correct: boolean): number {
  if (!j || j.failed) return j?.usedTools ? -0.5 : -1;
  return 1 - Math.abs(j.score - (correct ? 1 : 0));
}

/**
 * How a held-out judgement samples: at the temperature the reward model scores the policy with (an evaluation
 * at another temperature would measure a judge the policy stage never uses: a sampled one errs more often than
 * a greedy one), seeded by the task alone, so that every judge evaluated is drawn with the same random numbers.
 */
export function evaluationJudgeSettings(
  config: RewardModelEnvConfig,
  model: string,
  seed: number,
  taskId: string,
): JudgeSettings {
  return {
    ...config.judge,
    temperature: config.scoringTemperature ?? config.judge.temperature,
    model,
    seed: sampleSeed(seed, 'eval', taskId),
  };
}

/**
 * The reward model's environment. A task is a labelled candidate episode (prepared with the run: base, warm
 * started and corrupted episodes, balanced between correct and incorrect); a sample is one judgement of it by
 * the adapter being trained; its reward is agreement with the teacher's label (judgementReward).
 */
export function createRewardModelEnv(deps: EnvDeps): Env<RewardModelEnvConfig> {
  const candidate = async (runId: string, split: Split, task: string) => {
    const id = await deps.store.episodes.candidateId(runId, split, task);
    if (id === null) throw new DataError(`run ${runId} has no reward-model candidate ${task}`);
    const episode = await episodeWithQuestion(deps, id);
    const label = await deps.store.judgements.findLabel(id);
    if (!label) throw new DataError(`candidate ${task} of run ${runId} has no label`);
    return { episode, label };
  };

  const taskIds = async (config: RewardModelEnvConfig, runId: string, split: Split) =>
    balancedTasks(await deps.store.episodes.candidates(runId, split), config.seed, config.balance);

  /** Correct and incorrect candidates in equal shares per step: a step of one label teaches that verdict. */
  const taskStrata = async (_config: RewardModelEnvConfig, runId: string, split: Split) =>
    new Map(
      (await deps.store.episodes.candidates(runId, split)).map((c) => [
        c.task,
        c.correct ? 'correct' : 'incorrect',
      ]),
    );

  return {
    taskIds,
    taskStrata,

    async rollout(config, g, hooks) {
      const { episode } = await candidate(g.runId, 'train', g.taskId);
      const judgements = await Promise.all(
        Array.from({ length: g.groupSize }, (_, sample) =>
          judgementOnce(
            deps,
            episode,
            `${g.runId}:${g.stage}:${g.step}:${sample}`,
            { ...config.judge, model: g.model, seed: sampleSeed(g.seed, g.stage, g.step, g.taskId, sample) },
            hooks,
          ),
        ),
      );
      return judgements.map((j) => ({ kind: 'judgement' as const, id: j.id }));
    },

    async reward(_config, g, samples) {
      const { episode, label } = await candidate(g.runId, 'train', g.taskId);
      const judgements = await Promise.all(
        samples.map((_, sample) =>
          deps.store.judgements.findJudgement(episode.id, `${g.runId}:${g.stage}:${g.step}:${sample}`),
        ),
      );
      return {
        rewards_G: judgements.map((j) => judgementReward(j, label.correct)),
        success_G: judgements.map((j) => (j && !j.failed && j.score >= 0.5 === label.correct ? 1 : 0)),
        failed_G: judgements.map((j) => (!j || j.failed ? 1 : 0)),
      };
    },

    /** Judgements of held-out labelled candidates, sampled as it rewards → agreement, precision, recall, ECE. */
    async evaluate(config, input, hooks) {
      const label = await taskStrata(config, input.runId, input.split);
      const ids = evaluationTasks(await taskIds(config, input.runId, input.split), input, (id) =>
        label.get(id)!,
      );
      const limit = pLimit(EVALUATION_CONCURRENCY);
      const items = await Promise.all(
        ids.map((taskId) =>
          limit(async () => {
            const { episode, label } = await candidate(input.runId, input.split, taskId);
            const settings = evaluationJudgeSettings(config, input.model, input.seed, taskId);
            const j = await judgementOnce(
              deps,
              episode,
              `${input.runId}:eval:${input.label}`,
              settings,
              hooks,
            );
            return { score: j.score, confidence: j.confidence, failed: j.failed, label: label.correct };
          }),
        ),
      );
      return { ...rmMetrics(items) };
    },
  };
}
