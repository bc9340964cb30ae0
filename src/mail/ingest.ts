import os from 'node:os';
import path from 'node:path';
import type { Db } from '../store/db';
import { Piscina } from 'piscina';
import type { ParseResult, RawMessage } from './email';
import { deriveInboxAddresses, ingestedSources, storeBatchOrEach, type EmailsTurn } from '../store/ingest';

export interface IngestOptions {
  batchSize?: number;
  parseThreads?: number;
  onProgress?: (progress: IngestProgress) => void;
}

export interface IngestProgress {
  read: number;
  alreadyIngested: number;
  stored: number;
  duplicates: number;
  rejected: number;
}

export interface IngestReport extends IngestProgress {
  seconds: number;
  rejects: { source: string; reason: string }[];
}

const CHUNK = 250; // messages per parse task: big enough to amortise the hop to a worker thread
const STORES_AT_ONCE = 2; // batches stored at once, each on its own connection

/** A batch's turn to insert its emails ends once it has inserted them and the batch before's turn has ended. */
function nextTurn(previous: Promise<void>): EmailsTurn & { ended: Promise<void> } {
  let done!: () => void;
  const inserted = new Promise<void>((resolve) => (done = resolve));
  return { after: previous, done, ended: Promise.all([previous, inserted]).then(() => undefined) };
}

/**
 * Streams messages from disk through a pool of parser threads into PostgreSQL, in order, a batch per
 * transaction. Sources recorded in ingest_sources are skipped, so an interrupted ingest resumes and a
 * second one adds nothing. Bad messages are reported (and recorded), never fatal: a batch PostgreSQL refuses
 * is stored one message at a time.
 */
export async function ingest(
  db: Db,
  messages: AsyncIterable<RawMessage>,
  options: IngestOptions = {},
): Promise<IngestReport> {
  const started = Date.now();
  const batchSize = options.batchSize ?? 2000;
  const done = await ingestedSources(db);
  const progress: IngestProgress = { read: 0, alreadyIngested: 0, stored: 0, duplicates: 0, rejected: 0 };
  const rejectsByBatch: IngestReport['rejects'][] = []; // in batch order, however the stores interleave
  const touched = new Set<string>();
  const threads = options.parseThreads ?? Math.max(1, os.availableParallelism());
  // Threads are kept for the whole ingest: one that ends whenever the queue runs dry (while a store is
  // awaited) is started again, loading the parser afresh, a few times a second.
  const parsers = new Piscina({
    filename: path.join(__dirname, 'parseWorker.js'),
    minThreads: threads,
    maxThreads: threads,
    idleTimeout: 60_000,
  });
  const inFlight: Promise<ParseResult[]>[] = [];
  let pending: ParseResult[] = [];
  let chunk: RawMessage[] = [];

  // Batches are stored two at a time while the next ones are parsed: PostgreSQL's share of a batch (search
  // vectors, index updates) is most of ingest's CPU, and one connection uses one core.
  const storing: Promise<void>[] = [];
  let previousTurn: Promise<void> = Promise.resolve();
  const flush = async (force: boolean) => {
    if (pending.length === 0 || (!force && pending.length < batchSize)) return;
    const batch = pending;
    pending = [];
    if (storing.length >= STORES_AT_ONCE) await storing.shift();
    const turn = nextTurn(previousTurn);
    previousTurn = turn.ended;
    const index = rejectsByBatch.push([]) - 1;
    const stored = storeBatchOrEach(db, batch, turn).then((counts) => {
      progress.stored += counts.stored;
      progress.duplicates += counts.duplicates;
      progress.rejected += counts.rejects.length;
      rejectsByBatch[index] = counts.rejects;
      options.onProgress?.({ ...progress });
    });
    stored.catch(() => undefined); // its error is thrown where it is awaited, in order; not unhandled before
    storing.push(stored);
  };
  // Parsed chunks are taken oldest first, so which copy of a duplicate is stored does not depend on timing.
  const drainOldest = async () => {
    pending.push(...(await inFlight.shift()!));
    await flush(false);
  };
  const submit = async () => {
    inFlight.push(parsers.run(chunk));
    chunk = [];
    if (inFlight.length > parsers.options.maxThreads * 2) await drainOldest();
  };

  try {
    for await (const message of messages) {
      progress.read++;
      if (done.has(message.source)) {
        progress.alreadyIngested++;
        continue;
      }
      touched.add(message.inbox);
      chunk.push(message);
      if (chunk.length >= CHUNK) await submit();
    }
    if (chunk.length > 0) await submit();
    while (inFlight.length > 0) await drainOldest();
    await flush(true);
    for (const stored of storing) await stored;
    await deriveInboxAddresses(db, [...touched]);
  } finally {
    await parsers.destroy();
  }
  options.onProgress?.({ ...progress });
  return { ...progress, seconds: (Date.now() - started) / 1000, rejects: rejectsByBatch.flat() };
}
