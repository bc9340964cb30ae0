import { createHash } from 'node:crypto';
import { ApplicationFailure, heartbeat } from '@temporalio/activity';
import type OpenAI from 'openai';
import type pg from 'pg';
import { runEpisode, type AgentSettings } from '../env/emailAgent';
import type { Trajectory } from '../env/trajectory';
import { loadTrajectory, storeDeterministicReward, storeTrajectory } from '../env/trajectoryStore';
import { groupAdvantages } from '../grpo/advantages';
import { selectGroups } from '../grpo/dynamicSampling';
import { sampleTasks as pickTasks } from '../grpo/sampleTasks';
import { trainingSequences } from '../grpo/trainingSequences';
import { ModelServerError, type ModelServerClient } from '../modelServer/client';
import type { TrainHyperparameters, TrainStepResult } from '../modelServer/schemas';
import { deterministicReward, type RewardWeights } from '../reward/deterministic';

export interface PolicyStageDeps {
  pool: pg.Pool;
  llm: OpenAI;
  modelServer: ModelServerClient;
}

export interface StepKey {
  runId: string;
  stage: string;
  step: number;
}

export interface GroupResult {
  taskId: string;
  trajectoryIds: number[];
  rewards_G: number[];
}

/** The seed of one sample: a replayed rollout asks the sampler for the same tokens. */
export function sampleSeed(seed: number, key: StepKey, taskId: string, sample: number): number {
  const digest = createHash('sha256')
    .update(`${seed}:${key.runId}:${key.stage}:${key.step}:${taskId}:${sample}`)
    .digest();
  return digest.readUInt32LE(0);
}

/**
 * Activities of the policy stage. Payloads carry ids and small numbers; trajectories stay in PostgreSQL.
 * Each is idempotent: a retry finds what an earlier attempt stored and continues from there.
 */
export function createPolicyStageActivities({ pool, llm, modelServer }: PolicyStageDeps) {
  return {
    async sampleTasks(input: StepKey & { seed: number; count: number; offset: number }): Promise<string[]> {
      const { rows } = await pool.query<{ id: string }>(`SELECT id FROM questions WHERE split = 'train'`);
      if (rows.length === 0)
        throw ApplicationFailure.nonRetryable('no training questions: run `evalrl questions generate`');
      return pickTasks(
        rows.map((r) => r.id),
        input.seed,
        input.stage,
        input.step,
        input.count,
        new Set(),
        input.offset,
      );
    },

    /** One group: G episodes of one question, run concurrently, each stored once with its deterministic reward. */
    async rolloutGroup(
      input: StepKey & {
        seed: number;
        taskId: string;
        groupSize: number;
        agent: AgentSettings;
        weights: RewardWeights;
      },
    ): Promise<GroupResult> {
      const { rows } = await pool.query(
        `SELECT q.question, q.answer, q.message_ids, q.inbox_id, q.query_date, i.address
         FROM questions q JOIN inboxes i ON i.id = q.inbox_id WHERE q.id = $1`,
        [input.taskId],
      );
      if (rows.length === 0) throw ApplicationFailure.nonRetryable(`question ${input.taskId} not found`);
      const q = rows[0];
      const gold = { answer: q.answer as string, messageIds: q.message_ids as string[] };
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
          const existing = await pool.query<{ id: string }>(
            'SELECT id FROM trajectories WHERE run_id = $1 AND stage = $2 AND step = $3 AND task_id = $4 AND sample = $5',
            [key.runId, key.stage, key.step, key.taskId, key.sample],
          );
          let id: number;
          let trajectory: Trajectory;
          if (existing.rows.length > 0) {
            id = Number(existing.rows[0].id); // stored by an earlier attempt: not rolled out again
            trajectory = await loadTrajectory(pool, id);
          } else {
            const seed = sampleSeed(input.seed, input, input.taskId, sample);
            trajectory = await runEpisode(
              llm,
              pool,
              { question: q.question, inbox: q.inbox_id, inboxAddress: q.address, queryDate: q.query_date },
              { ...input.agent, seed },
            );
            ({ id } = await storeTrajectory(pool, key, input.taskId, trajectory));
          }
          const reward = deterministicReward(trajectory.facts, gold, input.agent.maxTurns, input.weights);
          await storeDeterministicReward(pool, id, reward);
          heartbeat({ done: ++done });
          return { id, reward: reward.total };
        }),
      );
      return {
        taskId: input.taskId,
        trajectoryIds: samples.map((s) => s.id),
        rewards_G: samples.map((s) => s.reward),
      };
    },

    /** Group-relative advantages with dynamic sampling; returns (trajectory id, advantage) pairs to train on. */
    async computeAdvantages(input: {
      groups: GroupResult[];
      wanted: number;
      divideByStd: boolean;
      dynamicSampling: { enabled: boolean; minStd: number };
    }) {
      const { kept, dropped, missing } = selectGroups(
        input.groups,
        input.wanted,
        input.dynamicSampling.minStd,
        input.dynamicSampling.enabled,
      );
      const advantages = kept.flatMap((g) => {
        const adv = groupAdvantages(g.rewards_G, input.divideByStd);
        return g.trajectoryIds.map((trajectoryId, i) => ({ trajectoryId, advantage: adv[i] }));
      });
      return { advantages, kept: kept.map((g) => g.taskId), dropped, missing };
    },

    /** One GRPO step on the model server (exactly once per adapter and step), heartbeating its progress. */
    async trainStep(input: {
      adapter: string;
      step: number;
      advantages: { trajectoryId: number; advantage: number }[];
      hyperparameters: Partial<TrainHyperparameters>;
      lora: { rank: number; alpha: number };
    }): Promise<TrainStepResult> {
      const sequences = [];
      for (const { trajectoryId, advantage } of input.advantages) {
        sequences.push(...trainingSequences((await loadTrajectory(pool, trajectoryId)).turns, advantage));
      }
      if (sequences.length === 0)
        throw ApplicationFailure.nonRetryable(`step ${input.step}: no sampled tokens to train on`);
      const beat = setInterval(
        async () => heartbeat(await modelServer.trainProgress(input.adapter).catch(() => undefined)),
        5000,
      );
      try {
        return await modelServer.trainStep({
          adapter: input.adapter,
          step: input.step,
          sequences,
          hyperparameters: input.hyperparameters,
          lora: input.lora,
        });
      } catch (err) {
        if (err instanceof ModelServerError && !err.retryable)
          throw ApplicationFailure.nonRetryable(err.message, 'BadTrainRequest');
        throw err;
      } finally {
        clearInterval(beat);
      }
    },

    async recordStepMetrics(input: StepKey & { metrics: Record<string, unknown> }): Promise<void> {
      await pool.query(
        `INSERT INTO step_metrics (run_id, stage, step, metrics) VALUES ($1, $2, $3, $4)
         ON CONFLICT (run_id, stage, step) DO UPDATE SET metrics = EXCLUDED.metrics`,
        [input.runId, input.stage, input.step, input.metrics],
      );
    },
  };
}

export type PolicyStageActivities = ReturnType<typeof createPolicyStageActivities>;
