import pLimit from 'p-limit';
import type { Env, PolicyEnvConfig } from '../grpo/env';
import { evaluationTasks } from '../grpo/sampleTasks';
import { referenceFreeReward } from '../reward/deterministic';
import { policyMetrics } from '../reward/evaluation';
import {
  episodeOnce,
  episodeWithQuestion,
  judgementOnce,
  questionOf,
  sampleSeed,
  type EnvDeps,
} from './episodes';

/** Episodes or judgements in flight at once in an evaluation; the model server batches them. */
export const EVALUATION_CONCURRENCY = 16;

/**
 * The reward model's part of a group's rewards. A failed judgement says nothing about its episode (the judge
 * broke, not the agent): it takes the mean of the group's valid judgements, so it adds no advantage either way
 * instead of punishing whichever episode the judge failed on. No valid judgement: 0 for all (no signal).
 */
export function groupJudgeScores(judgements: { score: number; failed: boolean }[]): number[] {
  const valid = judgements.filter((j) => !j.failed);
  const mean = valid.length ? valid.reduce((a, j) => a + j.score, 0) / valid.length : 0;
  return judgements.map((j) => (j.failed ? mean : j.score));
}

/**
 * The policy's environment. A task is a train question; a sample is one email-agent episode; its reward is
 * the deterministic layer (graded against the gold answer, or only its reference-free part) plus
 * `judge.weight` × the reward model's score of the episode.
 */
export function createPolicyEnv(deps: EnvDeps): Env<PolicyEnvConfig> {
  return {
    taskIds: (_config, _runId, split) => deps.store.questions.questionIds(split),

    async rollout(config, g, hooks) {
      const q = await questionOf(deps, g.taskId);
      const episodes = await Promise.all(
        Array.from({ length: g.groupSize }, (_, sample) =>
          episodeOnce(
            deps,
            { runId: g.runId, stage: g.stage, step: g.step, taskId: g.taskId, sample },
            q,
            { ...config.agent, model: g.model, seed: sampleSeed(g.seed, g.stage, g.step, g.taskId, sample) },
            config.weights,
            hooks,
          ),
        ),
      );
      return episodes.map((e) => ({ kind: 'trajectory' as const, id: e.id }));
    },

    async reward(config, g, samples, hooks) {
      const episodes = await Promise.all(samples.map((s) => episodeWithQuestion(deps, s.id)));
      const { judge } = config;
      const judgements =
        judge.weight === 0
          ? null
          : await Promise.all(
              episodes.map((e, sample) =>
                judgementOnce(
                  deps,
                  e,
                  `${g.runId}:${g.stage}:${judge.model}`,
                  {
                    ...judge.settings,
                    model: judge.model,
                    seed: sampleSeed(g.seed, g.stage, g.step, g.taskId, sample, 'judge'),
                  },
                  hooks,
                ),
              ),
            );
      const judgeScores = judgements ? groupJudgeScores(judgements) : episodes.map(() => 0);
      return {
        rewards_G: episodes.map(
          (e, i) =>
            (config.reward === 'gold'
              ? e.reward.total
              : referenceFreeReward(e.trajectory.facts, config.weights)) +
            judge.weight * judgeScores[i],
        ),
        success_G: episodes.map((e) => (e.reward.correct ? 1 : 0)),
        failed_G: episodes.map((e, i) =>
          e.trajectory.facts.ending === 'model_error' || judgements?.[i].failed ? 1 : 0,
        ),
      };
    },

    /** One greedy episode per held-out question → success, "I don't know", wrong answers, turns. */
    async evaluate(config, input, hooks) {
      const questions = await deps.store.questions.questionSources(input.split);
      const source = new Map(questions.map((q) => [q.id, q.source]));
      const ids = evaluationTasks([...source.keys()], input, (id) => source.get(id)!);
      const limit = pLimit(EVALUATION_CONCURRENCY);
      const rewards = await Promise.all(
        ids.map((taskId) =>
          limit(async () => {
            const key = { runId: input.runId, stage: `eval:${input.label}`, step: 0, taskId, sample: 0 };
            const agent = {
              ...config.agent,
              model: input.model,
              temperature: 0,
              seed: sampleSeed(input.seed, 'eval', taskId),
            };
            const { reward } = await episodeOnce(
              deps,
              key,
              await questionOf(deps, taskId),
              agent,
              config.weights,
              hooks,
            );
            return reward;
          }),
        ),
      );
      return { ...policyMetrics(rewards) };
    },
  };
}
