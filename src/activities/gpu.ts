import { setTimeout as sleep } from 'node:timers/promises';
import { Context } from '@temporalio/activity';
import { gpuHostQueue } from '../contract';
import type { StepCalls } from '../grpo/step';
import { trainingSequences } from '../grpo/trainingSequences';
import { ModelServerError, type ModelServerClient } from '../modelServer/client';
import type { TrainSequence, TrainStepResult } from '../modelServer/schemas';
import type { Store } from '../store';
import { DataError } from '../env/episodes';
import { classified } from './failures';

type Input<K extends keyof StepCalls> = Parameters<StepCalls[K]>[0];

/** The evalrl-gpu queues: "which host?" on the shared one; train steps on the host that holds the weights. */
export function createGpuActivities(store: Store, modelServer: ModelServerClient, host: string) {
  return {
    /** Asked on the shared GPU queue; answers with the queue of the host that picked it up. */
    async gpuHost(): Promise<string> {
      return gpuHostQueue(host);
    },

    /**
     * One training step on the model server, exactly once per adapter and step (the server refuses a
     * different request for a trained step). A retry after this worker died first waits for the step the
     * server may still be training, then asks again and gets its result.
     */
    trainStep: (input: Input<'trainStep'>) =>
      classified(async (): Promise<TrainStepResult> => {
        const context = Context.current();
        const sequences: TrainSequence[] = [];
        for (const { sample, advantage } of input.advantages) {
          const turns = await store.episodes.sampledTurns(sample);
          if (!turns) throw new DataError(`${sample.kind} ${sample.id} not found`);
          try {
            sequences.push(...trainingSequences(turns, advantage));
          } catch (err) {
            throw new DataError(`${sample.kind} ${sample.id}: ${(err as Error).message}`);
          }
        }
        // Without a KL term a zero-advantage sequence adds nothing to the gradient: it is not sent.
        const useful =
          input.hyperparameters.kl_coef > 0 ? sequences : sequences.filter((s) => s.advantage !== 0);
        const request = useful.length > 0 ? useful : sequences;
        if (request.length === 0) throw new DataError(`step ${input.step}: no sampled tokens to train on`);
        // Heartbeats every 5 s whatever the server does: a call that waits for a restarting server (the client
        // waits up to its unreachable budget) must not time the activity out. Each beat sends the last progress.
        let last: unknown;
        let refreshing = false;
        const beat = setInterval(() => {
          context.heartbeat(last);
          if (refreshing) return;
          refreshing = true;
          modelServer
            .trainProgress(input.adapter)
            .then((p) => (last = p))
            .catch(() => undefined)
            .finally(() => (refreshing = false));
        }, 5000);
        try {
          for (;;) {
            const progress = await modelServer.trainProgress(input.adapter);
            context.heartbeat((last = progress));
            if (!progress.running) break;
            await sleep(2000);
          }
          return await modelServer.trainStep({
            adapter: input.adapter,
            step: input.step,
            objective: input.objective,
            sequences: request,
            hyperparameters: input.hyperparameters,
            lora: input.lora,
            keep_checkpoints: input.keepCheckpoints,
          });
        } catch (err) {
          // Another attempt's request for this step is still training: retry later, it is not a bad request.
          if (err instanceof ModelServerError && err.status === 409 && /already training/.test(err.message))
            throw new ModelServerError(err.message, err.status, true);
          throw err;
        } finally {
          clearInterval(beat);
        }
      }),
  };
}
