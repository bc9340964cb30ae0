import { ApplicationFailure } from '@temporalio/activity';
import { BadSamplingRequest } from '../env/agentLoop';
import { DataError } from '../env/episodes';
import { ModelServerError } from '../modelServer/client';
import { redact, redactError } from '../redact';
import { BadTeacherRequest } from '../reward/teacherClient';
import { RunSpecError } from '../runSpec';

/**
 * Runs an activity's work and classifies its failure: bad data, a bad spec or a setting the sampler, the
 * trainer or the teacher refuses cannot be fixed by retrying — the run stops (blocked) and says why; anything
 * else (a network error, a server restarting) is retried. Messages, stacks, causes and details are redacted: they go into workflow history.
 */
export async function classified<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (caught) {
    const err = redactError(caught); // the whole chain: cause, errors, details (Temporal stores them all)
    const message = err instanceof Error ? err.message : redact(String(err));
    if (
      err instanceof DataError ||
      err instanceof RunSpecError ||
      err instanceof BadSamplingRequest ||
      err instanceof BadTeacherRequest
    )
      throw ApplicationFailure.nonRetryable(message, err.name);
    if (err instanceof ModelServerError && !err.retryable)
      throw ApplicationFailure.nonRetryable(message, 'BadModelServerRequest');
    throw err;
  }
}
