import { ApplicationFailure, heartbeat } from '@temporalio/activity';
import pLimit from 'p-limit';
import { sampleTasks as pickTasks } from '../grpo/sampleTasks';
import type { AgentTemplate, JudgeTemplate } from '../grpo/stage';
import type { RewardWeights } from '../reward/deterministic';
import { policyMetrics, rmMetrics } from '../reward/evaluation';
import { parseRunSpec, RunSpecError } from '../runSpec';
import {
  episodeOnce,
  judgementOnce,
  labelOf,
  loadEpisode,
  loadQuestion,
  sampleSeed,
  type EpisodeDeps,
} from './episodes';
import { candidateId, taskPool } from './grpoStage';

/** Episodes and judgements in flight at once; the model server batches them. */
const CONCURRENCY = 16;

export interface EvaluateInput {
  runId: string;
  /** Names the evaluation in the run, e.g. "policy:base" or "rewardModel:step-4". */
  label: string;
  kind: 'policy' | 'rewardModel';
  model: string;
  split: 'train' | 'test';
  count: number;
  seed: number;
  agent: AgentTemplate;
  judge: JudgeTemplate;
  weights: RewardWeights;
}

/** The activities that open and close a run: registration, the reward model's data, evaluation. */
export function createTrainingRunActivities(deps: EpisodeDeps) {
  const { pool } = deps;
  return {
    /**
     * Validates the spec again (a run started by hand is refused too), records the run and claims its
     * adapter names: an adapter another run trained is refused, never continued or overwritten.
     */
    async registerRun(input: { runId: string; spec: unknown }): Promise<void> {
      let spec;
      try {
        spec = parseRunSpec(input.spec, `run ${input.runId}`);
      } catch (err) {
        if (err instanceof RunSpecError) throw ApplicationFailure.nonRetryable(err.message, 'RunSpecError');
        throw err;
      }
      await pool.query('INSERT INTO runs (id, name, spec) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING', [
        input.runId,
        spec.name,
        spec,
      ]);
      for (const stage of ['rewardModel', 'policy'] as const) {
        const adapter = spec.models[stage].adapter;
        await pool.query(
          'INSERT INTO run_adapters (adapter, run_id, stage) VALUES ($1, $2, $3) ON CONFLICT (adapter) DO NOTHING',
          [adapter, input.runId, stage],
        );
        const { rows } = await pool.query('SELECT run_id, stage FROM run_adapters WHERE adapter = $1', [
          adapter,
        ]);
        if (rows[0].run_id !== input.runId || rows[0].stage !== stage)
          throw ApplicationFailure.nonRetryable(
            `models.${stage}.adapter: "${adapter}" belongs to run ${rows[0].run_id} (${rows[0].stage}); give this run its own adapter name`,
            'AdapterTaken',
          );
      }
      const { rows } = await pool.query<{ split: string; n: string }>(
        'SELECT split, count(*) AS n FROM questions GROUP BY split',
      );
      const count = (split: string) => Number(rows.find((r) => r.split === split)?.n ?? 0);
      if (count('train') === 0 || count('test') === 0)
        throw ApplicationFailure.nonRetryable(
          `questions: ${count('train')} train and ${count('test')} test questions; run \`evalrl ingest\` and \`evalrl questions generate\` first`,
          'NoQuestions',
        );
    },

    /**
     * The reward model's data: base-policy episodes on questions of a split, each labelled by the teacher
     * (or the deterministic layer). Stored under stage "candidates:<split>"; a retry reuses what is stored.
     */
    async prepareCandidates(input: {
      runId: string;
      seed: number;
      split: 'train' | 'test';
      questions: number;
      episodesPerQuestion: number;
      agent: AgentTemplate;
      weights: RewardWeights;
    }): Promise<number> {
      const stage = `candidates:${input.split}`;
      const ids = await taskPool(deps, input.runId, 'policy', input.split);
      const chosen = pickTasks(ids, input.seed, stage, 0, input.questions);
      const limit = pLimit(CONCURRENCY);
      let done = 0;
      const jobs = chosen.flatMap((taskId) =>
        Array.from({ length: input.episodesPerQuestion }, (_, sample) =>
          limit(async () => {
            const q = await loadQuestion(pool, taskId);
            const seed = sampleSeed(input.seed, stage, taskId, sample);
            const key = { runId: input.runId, stage, step: 0, taskId, sample };
            const { id } = await episodeOnce(
              deps,
              key,
              q,
              { ...input.agent, model: 'base', seed },
              input.weights,
            );
            await labelOf(deps, id, await loadEpisode(pool, id), input.weights, input.agent.maxTurns);
            heartbeat({ done: ++done, of: chosen.length * input.episodesPerQuestion });
          }),
        ),
      );
      await Promise.all(jobs);
      return jobs.length;
    },

    /**
     * A policy's evaluation: one greedy episode per held-out question → success, "I don't know", wrong
     * answers, turns. A reward model's: its judgements of held-out candidates against their labels.
     */
    async evaluate(input: EvaluateInput) {
      const limit = pLimit(CONCURRENCY);
      let done = 0;
      const stage = `eval:${input.label}`;
      let metrics: object;
      if (input.kind === 'policy') {
        const ids = pickTasks(
          await taskPool(deps, input.runId, 'policy', input.split),
          input.seed,
          'eval',
          0,
          input.count,
        );
        const rewards = await Promise.all(
          ids.map((taskId) =>
            limit(async () => {
              const key = { runId: input.runId, stage, step: 0, taskId, sample: 0 };
              const agent = {
                ...input.agent,
                model: input.model,
                temperature: 0,
                seed: sampleSeed(input.seed, 'eval', taskId),
              };
              const { reward } = await episodeOnce(
                deps,
                key,
                await loadQuestion(pool, taskId),
                agent,
                input.weights,
              );
              heartbeat({ done: ++done, of: ids.length });
              return reward;
            }),
          ),
        );
        metrics = policyMetrics(rewards);
      } else {
        const ids = (await taskPool(deps, input.runId, 'rewardModel', input.split)).slice(0, input.count);
        const items = await Promise.all(
          ids.map((taskId) =>
            limit(async () => {
              const id = await candidateId(deps, input.runId, input.split, taskId);
              const episode = await loadEpisode(pool, id);
              const label = await labelOf(deps, id, episode, input.weights, input.agent.maxTurns);
              const settings = {
                ...input.judge,
                model: input.model,
                temperature: 0,
                seed: sampleSeed(input.seed, 'eval', taskId),
              };
              const j = await judgementOnce(deps, id, `${input.runId}:${stage}`, episode, settings);
              heartbeat({ done: ++done, of: ids.length });
              return { score: j.score, confidence: j.confidence, failed: j.failed, label: label.correct };
            }),
          ),
        );
        metrics = rmMetrics(items);
      }
      await pool.query(
        `INSERT INTO evaluations (run_id, label, kind, model, split, metrics) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (run_id, label) DO UPDATE SET metrics = EXCLUDED.metrics`,
        [input.runId, input.label, input.kind, input.model, input.split, metrics],
      );
      return {
        label: input.label,
        kind: input.kind,
        model: input.model,
        metrics: metrics as Record<string, number>,
      };
    },
  };
}

export type TrainingRunActivities = ReturnType<typeof createTrainingRunActivities>;
