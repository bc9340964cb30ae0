import { ApplicationFailure, heartbeat } from '@temporalio/activity';
import { groupAdvantages } from '../grpo/advantages';
import { selectGroups } from '../grpo/dynamicSampling';
import { sampleTasks as pickTasks } from '../grpo/sampleTasks';
import { samplingModel } from '../grpo/stage';
import type { GrpoStepCalls, GroupResult } from '../grpo/step';
import {
  episodeOnce,
  judgementOnce,
  labelOf,
  loadEpisode,
  loadQuestion,
  sampleSeed,
  type EpisodeDeps,
} from './episodes';

type Input<K extends keyof GrpoStepCalls> = Parameters<GrpoStepCalls[K]>[0];

/**
 * Where each stage's tasks come from: questions for the policy; for the reward model, labelled candidate
 * episodes, named by their place ("question#sample") rather than their row id, so that two runs with the
 * same seed draw the same tasks.
 */
export async function taskPool(
  deps: EpisodeDeps,
  runId: string,
  env: 'policy' | 'rewardModel',
  split: 'train' | 'test',
) {
  const { rows } =
    env === 'policy'
      ? await deps.pool.query<{ id: string }>('SELECT id FROM questions WHERE split = $1 ORDER BY id', [
          split,
        ])
      : await deps.pool.query<{ id: string }>(
          `SELECT task_id || '#' || sample AS id FROM trajectories WHERE run_id = $1 AND stage = $2 ORDER BY task_id, sample`,
          [runId, `candidates:${split}`],
        );
  return rows.map((r) => r.id);
}

/** The stored candidate episode a reward-model task names. */
export async function candidateId(deps: EpisodeDeps, runId: string, split: 'train' | 'test', task: string) {
  const at = task.lastIndexOf('#');
  const { rows } = await deps.pool.query<{ id: string }>(
    'SELECT id FROM trajectories WHERE run_id = $1 AND stage = $2 AND step = 0 AND task_id = $3 AND sample = $4',
    [runId, `candidates:${split}`, task.slice(0, at), Number(task.slice(at + 1))],
  );
  if (rows.length === 0) throw ApplicationFailure.nonRetryable(`run ${runId} has no candidate ${task}`);
  return Number(rows[0].id);
}

/**
 * The activities of a GRPO stage that sample and score. Payloads carry ids and small numbers; episodes and
 * judgements stay in PostgreSQL. Each is idempotent: a retry finds what an earlier attempt stored.
 */
export function createGrpoStageActivities(deps: EpisodeDeps) {
  const { pool } = deps;
  return {
    async sampleTasks(input: Input<'sampleTasks'>): Promise<string[]> {
      const ids = await taskPool(deps, input.runId, input.env, 'train');
      if (ids.length === 0)
        throw ApplicationFailure.nonRetryable(
          input.env === 'policy'
            ? 'no training questions: run `evalrl questions generate`'
            : `run ${input.runId} has no reward-model candidates: its data preparation did not run`,
        );
      return pickTasks(ids, input.seed, input.stage, input.step, input.count, new Set(), input.offset);
    },

    /** The policy's group: G episodes of one question, run concurrently, each stored once with its deterministic reward. */
    async rolloutGroup(input: Input<'rolloutGroup'>): Promise<GroupResult> {
      if (input.env.kind !== 'policy')
        throw ApplicationFailure.nonRetryable('rolloutGroup: policy stage only');
      const { agent, weights } = input.env;
      const q = await loadQuestion(pool, input.taskId);
      let done = 0;
      const samples = await Promise.all(
        Array.from({ length: input.groupSize }, async (_, sample) => {
          const key = {
            runId: input.runId,
            stage: input.stage,
            step: input.step,
            taskId: input.taskId,
            sample,
          };
          const seed = sampleSeed(input.seed, input.stage, input.step, input.taskId, sample);
          const model = samplingModel(input.adapter, input.step);
          const episode = await episodeOnce(deps, key, q, { ...agent, model, seed }, weights);
          heartbeat({ done: ++done });
          return episode;
        }),
      );
      return {
        taskId: input.taskId,
        samples: samples.map((s) => ({ kind: 'trajectory' as const, id: s.id })),
        rewards_G: samples.map((s) => s.reward.total),
        success_G: samples.map((s) => (s.reward.correct ? 1 : 0)),
      };
    },

    /**
     * Policy stage: the reward model judges each episode; reward = deterministic total + weight × its score.
     * Reward-model stage: G judgements of one labelled candidate episode by the adapter being trained;
     * reward = 1 − |score − label| (a failed judgement scores 0).
     */
    async judgeGroup(input: Input<'judgeGroup'>): Promise<GroupResult> {
      let done = 0;
      if (input.env.kind === 'policy') {
        const { judge } = input.env;
        const rolled = input.rolledOut;
        if (!rolled)
          throw ApplicationFailure.nonRetryable('judgeGroup: the policy stage judges rolled-out episodes');
        if (judge.weight === 0) return rolled;
        const scores = await Promise.all(
          rolled.samples.map(async ({ id }, sample) => {
            const seed = sampleSeed(input.seed, input.stage, input.step, input.taskId, sample, 'judge');
            const j = await judgementOnce(
              deps,
              id,
              `${input.runId}:policy:${judge.model}`,
              await loadEpisode(pool, id),
              {
                ...judge.settings,
                model: judge.model,
                seed,
              },
            );
            heartbeat({ done: ++done });
            return j.score;
          }),
        );
        return { ...rolled, rewards_G: rolled.rewards_G.map((r, i) => r + judge.weight * scores[i]) };
      }
      const { judge, weights, agent } = input.env;
      const candidate = await candidateId(deps, input.runId, 'train', input.taskId);
      const episode = await loadEpisode(pool, candidate);
      const label = await labelOf(deps, candidate, episode, weights, agent.maxTurns);
      const model = samplingModel(input.adapter, input.step);
      const judgements = await Promise.all(
        Array.from({ length: input.groupSize }, async (_, sample) => {
          const seed = sampleSeed(input.seed, input.stage, input.step, input.taskId, sample);
          const key = `${input.runId}:rewardModel:${input.step}:${sample}`;
          const j = await judgementOnce(deps, candidate, key, episode, { ...judge, model, seed });
          heartbeat({ done: ++done });
          return j;
        }),
      );
      const agreement = judgements.map((j) =>
        j.failed ? 0 : 1 - Math.abs(j.score - (label.correct ? 1 : 0)),
      );
      return {
        taskId: input.taskId,
        samples: judgements.map((j) => ({ kind: 'judgement' as const, id: j.id })),
        rewards_G: agreement,
        success_G: judgements.map((j) => (!j.failed && j.score >= 0.5 === label.correct ? 1 : 0)),
      };
    },

    /**
     * Group-relative advantages with dynamic sampling. When every group was dropped the step still trains,
     * on all groups at advantage 0, so that the step sequence stays whole.
     */
    async computeAdvantages(input: Input<'computeAdvantages'>) {
      const { kept, dropped, missing } = selectGroups(
        input.groups,
        input.wanted,
        input.dynamicSampling.minStd,
        input.dynamicSampling.enabled,
      );
      const advantages =
        kept.length > 0
          ? kept.flatMap((g) => {
              const adv = groupAdvantages(g.rewards_G, input.divideByStd);
              return g.samples.map((sample, i) => ({ sample, advantage: adv[i] }));
            })
          : input.groups.flatMap((g) => g.samples.map((sample) => ({ sample, advantage: 0 })));
      return { advantages, kept: kept.map((g) => g.taskId), dropped, missing };
    },

    async recordStepMetrics(input: Input<'recordStepMetrics'>): Promise<void> {
      await pool.query(
        `INSERT INTO step_metrics (run_id, stage, step, metrics) VALUES ($1, $2, $3, $4)
         ON CONFLICT (run_id, stage, step) DO UPDATE SET metrics = EXCLUDED.metrics`,
        [input.runId, input.stage, input.step, input.metrics],
      );
    },

    /** Where a (re)started stage continues: after the last step whose metrics were recorded. */
    async nextStep(input: { runId: string; stage: string }): Promise<number> {
      const { rows } = await pool.query<{ last: number | null }>(
        'SELECT max(step) AS last FROM step_metrics WHERE run_id = $1 AND stage = $2',
        [input.runId, input.stage],
      );
      return (rows[0].last ?? 0) + 1;
    },
  };
}

export type GrpoStageActivities = ReturnType<typeof createGrpoStageActivities>;
