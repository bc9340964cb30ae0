import { ingest } from '../../src/mail/ingest';
import type { ParseResult, RawMessage } from '../../src/mail/email';
import type { Db } from '../../src/store/db';
import type { storeBatchOrEach } from '../../src/store/ingest';

const MiB = 2 ** 20;
const db = { query: async () => ({ rows: [], rowCount: 0 }) } as unknown as Db;

async function* large(count: number, size: number): AsyncGenerator<RawMessage> {
  for (let i = 0; i < count; i++)
    yield { inbox: 'u', folder: 'f', source: `big/${i}`, raw: Buffer.alloc(size, 97) };
}

const parseChunk = async (chunk: RawMessage[]): Promise<ParseResult[]> => {
  await new Promise((resolve) => setTimeout(resolve, 2));
  return chunk.map((m) => ({
    inbox: m.inbox,
    folder: m.folder,
    source: m.source,
    ok: false as const,
    reason: 'stand-in',
  }));
};
const storeBatch: typeof storeBatchOrEach = async (_db, results) => {
  await new Promise((resolve) => setTimeout(resolve, 5)); // COPY takes a while: parsed batches wait
  return { stored: results.length, duplicates: 0, rejects: [], notes: [] };
};

async function run(maxBytesInFlight: number) {
  let peak = 0;
  let last = -1;
  const report = await ingest(db, large(60, 5 * MiB), {
    parseThreads: 4,
    batchSize: 2000,
    maxBytesInFlight,
    parseChunk,
    storeBatch,
    onBytesInFlight: (bytes) => {
      peak = Math.max(peak, bytes);
      last = bytes;
    },
  });
  return { report, peak, last };
}

describe('ingest memory', () => {
  it('holds at most its byte budget of messages, from reading to COPY, whatever their number and size', async () => {
    const { report, peak, last } = await run(16 * MiB);
    expect(report.stored).toBe(60); // every message went through, in batches smaller than batchSize
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(16 * MiB);
    expect(report.peakBytesInFlight).toBe(peak);
    expect(last).toBe(0); // every byte given back once committed
  });

  it('lets one message over the budget through alone', async () => {
    const { report, peak } = await run(1 * MiB);
    expect(report.stored).toBe(60);
    expect(peak).toBe(5 * MiB);
  });

  it('without a budget holds the whole batch (what ingest did before)', async () => {
    const { peak } = await run(Infinity);
    expect(peak).toBe(60 * 5 * MiB);
  });
});
