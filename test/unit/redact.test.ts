import { ApplicationFailure } from '@temporalio/common';
import { classified } from '../../src/activities/failures';
import { DataError } from '../../src/env/episodes';
import { redact } from '../../src/redact';

const env = { EVALRL_TEACHER_API_KEY: 'sk-teacher-0123456789', DATABASE_URL: 'postgres://u:pw@db/evalrl' };

describe('secrets', () => {
  it('are taken out of text: credentials in URLs and the values of secret variables', () => {
    expect(redact('cannot reach https://bob:hunter2@teacher.example/v1 (401)', env)).toBe(
      'cannot reach https://***@teacher.example/v1 (401)',
    );
    expect(redact('postgres://evalrl:s3cret@10.0.0.2:5432/evalrl refused', env)).toBe(
      'postgres://***@10.0.0.2:5432/evalrl refused',
    );
    expect(redact('bad key sk-teacher-0123456789 for the teacher', env)).toBe('bad key *** for the teacher');
    expect(redact('http://127.0.0.1:8000/v1 unreachable', env)).toBe('http://127.0.0.1:8000/v1 unreachable');
  });

  it('never reach workflow history through an activity failure, its message or its stack trace', async () => {
    const retryable = await classified(async () => {
      throw new Error('model server at http://svc:tok3n@10.0.0.5:8000 unreachable');
    }).catch((e: Error) => e);
    expect(retryable.message).toBe('model server at http://***@10.0.0.5:8000 unreachable');
    expect(retryable.stack).not.toContain('tok3n');
    const fatal = await classified(async () => {
      throw new DataError('teacher https://a:b@t.example refused the label');
    }).catch((e: Error) => e);
    expect(fatal).toBeInstanceOf(ApplicationFailure);
    expect(fatal.message).toBe('teacher https://***@t.example refused the label');
    expect((fatal as ApplicationFailure).nonRetryable).toBe(true);
  });

  it('never reach history through the error chain: cause, aggregated errors, failure details (issue 47)', async () => {
    const inner = new Error('connect ECONNREFUSED postgres://evalrl:chainpw1@db:5432/evalrl');
    const outer = new Error('query failed', { cause: inner });
    (inner as Error & { cause?: unknown }).cause = outer; // a cycle ends
    const retryable = await classified(async () => {
      throw outer;
    }).catch((e: Error) => e);
    const chain = (e: unknown, depth = 0): string =>
      depth > 4 || !(e instanceof Error) ? String(e) : `${e.message} ${e.stack} ${chain(e.cause, depth + 1)}`;
    expect(chain(retryable)).not.toContain('chainpw1');
    expect((retryable.cause as Error).message).toBe('connect ECONNREFUSED postgres://***@db:5432/evalrl');

    const aggregate = await classified(async () => {
      throw new AggregateError([new Error('https://u:aggpw123@a.example down')], 'all failed');
    }).catch((e: AggregateError) => e);
    expect(JSON.stringify(aggregate.errors.map((e: Error) => [e.message, e.stack]))).not.toContain(
      'aggpw123',
    );

    const failure = await classified(async () => {
      throw ApplicationFailure.create({
        message: 'teacher refused',
        details: [{ url: 'https://k:detpw123@t.example' }, 'sk-teacher-0123456789'],
        cause: new Error('https://k:causepw1@t.example 401'),
      });
    }).catch((e: ApplicationFailure) => e);
    const text =
      JSON.stringify(failure.details) + (failure.cause as Error).message + (failure.cause as Error).stack;
    expect(text).not.toMatch(/detpw123|causepw1/);
  });
});
