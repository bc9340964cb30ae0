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
});
