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
  /**
   * Bytes of messages held at once, from read to committed (default MAX_BYTES_IN_FLIGHT): read, waiting for or
   * in a parser thread, or parsed and waiting for COPY. A message that would pass it waits (the ones ahead
   * are pushed on to PostgreSQL, in smaller batches if need be); one message alone always goes.
   */
  maxBytesInFlight?: number;
  /** Called with the bytes in flight whenever they change (the test's counter). */
  onBytesInFlight?: (bytes: number) => void;
  /** Stand-ins for the parser threads and the store (tests). */
  parseChunk?: (chunk: RawMessage[]) => Promise<ParseResult[]>;
  storeBatch?: typeof storeBatchOrEach;
}

/**
 * Memory bound of an ingest, in message bytes (raw file bytes, or a JSONL line's characters). A parsed message
 * takes about as much again while both are held, so the heap holds at most ~2-3× this for messages.
 */
export const MAX_BYTES_IN_FLIGHT = 256 * 2 ** 20;

/** Size of a message as read, what the in-flight budget counts. */
export const messageBytes = (m: RawMessage): number =>
  'raw' in m ? m.raw.byteLength : 'json' in m ? (m.bytes ?? 0) : 0;

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
  /** Most message bytes held at once (see IngestOptions.maxBytesInFlight). */
  peakBytesInFlight: number;
  /** Messages kept after a repair (a subject truncated, NULs stripped), with what was changed. */
  notes: { source: string; note: string }[];
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
  const notesByBatch: IngestReport['notes'][] = [];
  const touched = new Set<string>();
  const threads = options.parseThreads ?? Math.max(1, os.availableParallelism());
  // Threads are kept for the whole ingest: one that ends whenever the queue runs dry (while a store is
  // awaited) is started again, loading the parser afresh, a few times a second.
  const parsers = options.parseChunk
    ? undefined
    : new Piscina({
        filename: path.join(__dirname, 'parseWorker.js'),
        minThreads: threads,
        maxThreads: threads,
        idleTimeout: 60_000,
      });
  const parse = options.parseChunk ?? ((c: RawMessage[]) => parsers!.run(c) as Promise<ParseResult[]>);
  const store = options.storeBatch ?? storeBatchOrEach;
  const inFlight: { results: Promise<ParseResult[]>; bytes: number }[] = [];
  let pending: ParseResult[] = [];
  let pendingBytes = 0;
  let chunk: RawMessage[] = [];
  let chunkBytes = 0;
  // The byte budget: taken when a message is read, given back when its batch is committed.
  const budget = options.maxBytesInFlight ?? MAX_BYTES_IN_FLIGHT;
  let bytesInFlight = 0;
  let peakBytesInFlight = 0;
  const account = (delta: number) => {
    bytesInFlight += delta;
    peakBytesInFlight = Math.max(peakBytesInFlight, bytesInFlight);
    if (delta !== 0) options.onBytesInFlight?.(bytesInFlight);
  };

  // Batches are stored two at a time while the next ones are parsed: PostgreSQL's share of a batch (search
  // vectors, index updates) is most of ingest's CPU, and one connection uses one core.
  const storing: Promise<void>[] = [];
  let previousTurn: Promise<void> = Promise.resolve();
  const flush = async (force: boolean) => {
    if (pending.length === 0 || (!force && pending.length < batchSize)) return;
    const batch = pending;
    const batchBytes = pendingBytes;
    pending = [];
    pendingBytes = 0;
    if (storing.length >= STORES_AT_ONCE) await storing.shift();
    const turn = nextTurn(previousTurn);
    previousTurn = turn.ended;
    const index = rejectsByBatch.push([]) - 1;
    notesByBatch.push([]);
    const stored = store(db, batch, turn).then((counts) => {
      account(-batchBytes);
      progress.stored += counts.stored;
      progress.duplicates += counts.duplicates;
      progress.rejected += counts.rejects.length;
      rejectsByBatch[index] = counts.rejects;
      notesByBatch[index] = counts.notes;
      options.onProgress?.({ ...progress });
    });
    stored.catch(() => undefined); // its error is thrown where it is awaited, in order; not unhandled before
    storing.push(stored);
  };
  // Parsed chunks are taken oldest first, so which copy of a duplicate is stored does not depend on timing.
  const drainOldest = async () => {
    const oldest = inFlight.shift()!;
    pending.push(...(await oldest.results));
    pendingBytes += oldest.bytes;
    await flush(false);
  };
  const submit = async () => {
    const results = parse(chunk);
    results.catch(() => undefined); // thrown where it is awaited, in order
    inFlight.push({ results, bytes: chunkBytes });
    chunk = [];
    chunkBytes = 0;
    if (inFlight.length > threads * 2) await drainOldest();
  };
  // Waits until `bytes` more fit the budget, pushing what is held on towards PostgreSQL meanwhile.
  const reserve = async (bytes: number) => {
    while (bytesInFlight > 0 && bytesInFlight + bytes > budget) {
      if (chunk.length > 0) await submit();
      else if (inFlight.length > 0) await drainOldest();
      else if (pending.length > 0) await flush(true);
      else if (storing.length > 0) await storing.shift();
      else break;
    }
    account(bytes);
  };

  try {
    for await (const message of messages) {
      progress.read++;
      if (done.has(message.source)) {
        progress.alreadyIngested++;
        continue;
      }
      touched.add(message.inbox);
      const bytes = messageBytes(message);
      await reserve(bytes);
      chunk.push(message);
      chunkBytes += bytes;
      if (chunk.length >= CHUNK) await submit();
    }
    if (chunk.length > 0) await submit();
    while (inFlight.length > 0) await drainOldest();
    await flush(true);
    for (const stored of storing) await stored;
    await deriveInboxAddresses(db, [...touched]);
  } finally {
    await parsers?.destroy();
  }
  options.onProgress?.({ ...progress });
  return {
    ...progress,
    seconds: (Date.now() - started) / 1000,
    rejects: rejectsByBatch.flat(),
    peakBytesInFlight,
    notes: notesByBatch.flat(),
  };
}
