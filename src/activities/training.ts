import { setTimeout as sleep } from 'node:timers/promises';
import { ApplicationFailure, heartbeat } from '@temporalio/activity';
import type pg from 'pg';
import type { Turn } from '../env/trajectory';
import type { GrpoStepCalls, SampleRef } from '../grpo/step';
import { trainingSequences } from '../grpo/trainingSequences';
import { ModelServerError, type ModelServerClient } from '../modelServer/client';
import type { TrainStepResult } from '../modelServer/schemas';
import { TASK_QUEUES } from '../taskQueues';

type Input<K extends keyof GrpoStepCalls> = Parameters<GrpoStepCalls[K]>[0];

/** The task queue of one GPU host: a step's train and publish run where its model server holds the weights. */
export const gpuHostQueue = (host: string) => `${TASK_QUEUES.gpu}@${host}`;

async function sampledTurns(pool: pg.Pool, { kind, id }: SampleRef): Promise<Turn[]> {
  const table = kind === 'trajectory' ? 'trajectories' : 'judgements';
  const { rows } = await pool.query<{ turns: Turn[] }>(`SELECT turns FROM ${table} WHERE id = $1`, [id]);
  if (rows.length === 0) throw ApplicationFailure.nonRetryable(`${kind} ${id} not found`);
  return rows[0].turns;
}

export function createTrainingActivities({
  pool,
  modelServer,
  host,
}: {
  pool: pg.Pool;
  modelServer: ModelServerClient;
  host: string;
}) {
  return {
    /** Asked on the shared GPU queue; answers with the queue of the host that picked it up. */
    async gpuHost(): Promise<string> {
      return gpuHostQueue(host);
    },

    /**
     * One GRPO step on the model server, exactly once per adapter and step. A retry after this worker died
     * first waits for the step the server may still be training, then asks again and gets its result.
     */
    async trainStep(input: Input<'trainStep'>): Promise<TrainStepResult> {
      const sequences = [];
      for (const { sample, advantage } of input.advantages)
        sequences.push(...trainingSequences(await sampledTurns(pool, sample), advantage));
      if (sequences.length === 0)
        throw ApplicationFailure.nonRetryable(`step ${input.step}: no sampled tokens to train on`);
      for (;;) {
        const progress = await modelServer.trainProgress(input.adapter);
        heartbeat(progress);
        if (!progress.running) break;
        await sleep(2000);
      }
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
          keep_checkpoints: input.keepCheckpoints,
        });
      } catch (err) {
        if (err instanceof ModelServerError && err.status === 409 && /already training/.test(err.message))
          throw err; // another attempt's request is still running: retry later
        if (err instanceof ModelServerError && !err.retryable)
          throw ApplicationFailure.nonRetryable(err.message, 'BadTrainRequest');
        throw err;
      } finally {
        clearInterval(beat);
      }
    },

    /** Records the step's adapter version (where it lies, its hash): what evaluation and reports read. */
    async publishAdapter(input: Input<'publishAdapter'>): Promise<void> {
      await pool.query(
        `INSERT INTO published_adapters (adapter, step, run_id, stage, checkpoint, sha256)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (adapter, step) DO NOTHING`,
        [input.adapter, input.step, input.runId, input.stage, input.checkpoint, input.sha256],
      );
    },
  };
}

export type TrainingActivities = ReturnType<typeof createTrainingActivities>;
