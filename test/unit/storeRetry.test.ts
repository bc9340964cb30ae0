import { Writable } from 'node:stream';
import type { Db } from '../../src/store/db';
import type { ParseResult } from '../../src/mail/email';
import { isMessageFault, isTransientDbError, storeBatchOrEach } from '../../src/store/ingest';

const pgError = (code: string, message: string) => Object.assign(new Error(message), { code });

/**
 * A pool whose INSERT INTO emails fails as PostgreSQL would for the messages its batch holds: `<bad@x>` with a
 * data exception (22008) every time, `<flaky@x>` with a serialization failure (40001) its first `flaky` times.
 */
function fakePool(flaky: number) {
  const rejected: string[] = [];
  let tries = 0;
  const client = {
    copied: '',
    query(q: unknown, params?: unknown[]) {
      if (typeof q !== 'string') {
        client.copied = '';
        return new Writable({
          write(chunk, _enc, cb) {
            client.copied += chunk.toString();
            cb();
          },
        });
      }
      if (q.includes('INSERT INTO emails')) {
        if (client.copied.includes('<bad@x>'))
          return Promise.reject(pgError('22008', 'date/time field value out of range'));
        if (client.copied.includes('<flaky@x>') && tries++ < flaky)
          return Promise.reject(pgError('40001', 'could not serialize access'));
        return Promise.resolve({ rows: [], rowCount: client.copied.split('\n').length - 1 });
      }
      if (q.includes("'rejected'")) rejected.push(...(params![0] as string[]));
      return Promise.resolve({ rows: [], rowCount: 0 });
    },
    release() {},
  };
  const pool = { query: client.query, connect: async () => client } as unknown as Db;
  return { pool, rejected };
}

const message = (id: string): ParseResult => ({
  inbox: 'u',
  folder: 'f',
  source: id,
  ok: true,
  email: {
    messageId: `<${id}@x>`,
    subject: id,
    from: { address: 'a@b.c', name: '' },
    date: new Date(0),
    to: [],
    cc: [],
    bcc: [],
    body: id,
  },
});

describe('a failed batch', () => {
  it('tells the data’s faults from transient database errors', () => {
    for (const code of ['22008', '22P02', '23505', '54000'])
      expect(isMessageFault(pgError(code, ''))).toBe(true);
    for (const code of ['08006', '40001', '40P01', '53300', '57P01']) {
      expect(isTransientDbError(pgError(code, ''))).toBe(true);
      expect(isMessageFault(pgError(code, ''))).toBe(false);
    }
    expect(isTransientDbError(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }))).toBe(
      true,
    );
    expect(isTransientDbError(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isMessageFault(pgError('42P01', 'relation does not exist'))).toBe(false);
  });

  it('retries a transient error met in the one-message fallback instead of rejecting the message', async () => {
    const { pool, rejected } = fakePool(2);
    const counts = await storeBatchOrEach(pool, [message('good'), message('bad'), message('flaky')]);
    expect(rejected).toEqual(['bad']);
    expect(counts).toMatchObject({
      stored: 2,
      rejects: [{ source: 'bad', reason: expect.stringMatching(/^not storable: date/) }],
    });
  });

  it('gives up on an error that stays transient, rejecting nothing', async () => {
    const { pool, rejected } = fakePool(Infinity);
    await expect(storeBatchOrEach(pool, [message('flaky')])).rejects.toMatchObject({ code: '40001' });
    expect(rejected).toEqual([]);
  });
});
