import os from 'node:os';
import path from 'node:path';
import type { Db } from '../store/db';
import { Piscina } from 'piscina';
import type { ParseResult, RawMessage } from './email';
import { deriveInboxAddresses, ingestedSources, storeBatchOrEach } from '../store/ingest';

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
  const rejects: IngestReport['rejects'] = [];
  const touched = new Set<string>();
  const parsers = new Piscina({
    filename: path.join(__dirname, 'parseWorker.js'),
    maxThreads: options.parseThreads ?? Math.max(1, os.availableParallelism()),
  });
  const inFlight: Promise<ParseResult[]>[] = [];
  let pending: ParseResult[] = [];
  let chunk: RawMessage[] = [];

  // One batch is stored while the next is parsed: PostgreSQL and the parser threads work at the same time.
  let storing: Promise<void> = Promise.resolve();
  const flush = async (force: boolean) => {
    if (pending.length === 0 || (!force && pending.length < batchSize)) return;
    const batch = pending;
    pending = [];
    await storing;
    storing = storeBatchOrEach(db, batch).then((counts) => {
      progress.stored += counts.stored;
      progress.duplicates += counts.duplicates;
      progress.rejected += counts.rejects.length;
      rejects.push(...counts.rejects);
      options.onProgress?.({ ...progress });
    });
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
    await storing;
    await deriveInboxAddresses(db, [...touched]);
  } finally {
    await parsers.destroy();
  }
  options.onProgress?.({ ...progress });
  return { ...progress, seconds: (Date.now() - started) / 1000, rejects };
}
