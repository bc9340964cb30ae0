import { ApplicationFailure } from '@temporalio/activity';
import { BadSamplingRequest } from '../env/agentLoop';
import { DataError } from '../env/episodes';
import { ModelServerError } from '../modelServer/client';
import { redact } from '../redact';
import { BadTeacherRequest } from '../reward/teacherClient';
import { RunSpecError } from '../runSpec';

/**
 * Runs an activity's work and classifies its failure: bad data, a bad spec or a setting the sampler, the
 * trainer or the teacher refuses cannot be fixed by retrying — the run stops (blocked) and says why; anything
 * else (a network error, a server restarting) is retried. Messages are redacted: they go into workflow history.
 */
export async function classified<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    const message = redact(err instanceof Error ? err.message : String(err));
    if (
      err instanceof DataError ||
      err instanceof RunSpecError ||
      err instanceof BadSamplingRequest ||
      err instanceof BadTeacherRequest
    )
      throw ApplicationFailure.nonRetryable(message, err.name);
    if (err instanceof ModelServerError && !err.retryable)
      throw ApplicationFailure.nonRetryable(message, 'BadModelServerRequest');
    if (err instanceof Error) {
      err.message = message;
      if (err.stack) err.stack = redact(err.stack); // Temporal stores the stack trace in history too
    }
    throw err;
  }
}
