import { createHash } from 'node:crypto';
import { from as copyFrom } from 'pg-copy-streams';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { inTransaction } from '../db/pool';
import type { ParseResult } from '../mail/email';
import type { Db } from './db';

export interface BatchCounts {
  stored: number;
  duplicates: number;
  rejects: { source: string; reason: string }[];
  /** Messages stored after a repair (a field truncated, NULs stripped), with what was changed. */
  notes: { source: string; note: string }[];
}

/** COPY text format escaping: backslash, tab, newline and carriage return. */
const copyField = (value: string) =>
  value.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r');

/**
 * Orders the emails inserts of batches stored at once: a batch inserts its emails only `after` the batch
 * before it has inserted its own, and calls `done` when it has (or has failed). Of two copies of a duplicate
 * in flight together, the older batch's is then stored, as when batches are stored one by one.
 */
export interface EmailsTurn {
  after: Promise<void>;
  done: () => void;
}

/**
 * Stores a batch; if PostgreSQL refuses it (a value the parser let through), stores its messages one at a
 * time, so that one poison message costs only itself: it is recorded as rejected with PostgreSQL's reason and
 * every good message of the batch is stored.
 */
export async function storeBatchOrEach(
  db: Db,
  results: ParseResult[],
  turn?: EmailsTurn,
): Promise<BatchCounts> {
  try {
    return await storeRetrying(db, results, turn);
  } catch (err) {
    // Only a refusal the data causes splits a batch or rejects a message; any other error (a transient one
    // retried to its limit, a fault of the database or of this code) ends the ingest, which resumes here.
    if (!isMessageFault(err)) throw err;
    if (results.length === 1) {
      const { inbox, folder, source, ok } = results[0];
      if (!ok) throw err; // recording a reject failed: the database's fault, not the message's
      return storeRetrying(db, [
        { inbox, folder, source, ok: false, reason: `not storable: ${(err as Error).message}` },
      ]);
    }
    const total: BatchCounts = { stored: 0, duplicates: 0, rejects: [], notes: [] };
    for (const r of results) {
      const counts = await storeBatchOrEach(db, [r]);
      total.stored += counts.stored;
      total.duplicates += counts.duplicates;
      total.rejects.push(...counts.rejects);
      total.notes.push(...counts.notes);
    }
    return total;
  }
}

/** Tries of a batch that fails transiently (a lost connection, a serialization failure, a server short of resources). */
export const TRANSIENT_TRIES = 5;

const sqlState = (err: unknown): string | undefined => {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
};

/**
 * A PostgreSQL error worth retrying: connection exceptions (class 08), transaction rollbacks such as
 * serialization failures and deadlocks (40), insufficient resources (53), an operator or admin shutdown
 * (57), and a connection that broke before PostgreSQL answered.
 */
export function isTransientDbError(err: unknown): boolean {
  const state = sqlState(err);
  if (state) return ['08', '40', '53', '57'].includes(state.slice(0, 2));
  const code = (err as { code?: unknown } | null)?.code;
  if (
    typeof code === 'string' &&
    /^(ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH)$/.test(code)
  )
    return true;
  return /Connection terminated|connection timeout|Client has encountered a connection error/i.test(
    (err as Error | null)?.message ?? '',
  );
}

/**
 * An error the stored data caused: a data exception (class 22: a date out of range, bad encoding), an integrity
 * violation (23), or a value over a program limit (54: a tsvector too long). Errors that carry no SQLSTATE and
 * are not transient (thrown while building a batch) count as the data's too.
 */
export function isMessageFault(err: unknown): boolean {
  const state = sqlState(err);
  if (state) return ['22', '23', '54'].includes(state.slice(0, 2));
  return !isTransientDbError(err);
}

async function storeRetrying(db: Db, results: ParseResult[], turn?: EmailsTurn): Promise<BatchCounts> {
  for (let attempt = 1; ; attempt++) {
    try {
      // A retry still waits for the older batches; its own done() was called by the failed try.
      const retryTurn = turn && { after: turn.after, done: () => undefined };
      return await storeBatch(db, results, attempt === 1 ? turn : retryTurn);
    } catch (err) {
      if (!isTransientDbError(err) || attempt >= TRANSIENT_TRIES) throw err;
      await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** attempt));
    }
  }
}

export async function storeBatch(db: Db, results: ParseResult[], turn?: EmailsTurn): Promise<BatchCounts> {
  const good = results.filter((r) => r.ok);
  const bad = results.filter((r) => !r.ok);
  // Committed on their own: a new inbox row held by an open batch would make every other batch of that
  // inbox wait for its commit.
  await db.query(
    'INSERT INTO inboxes (id) SELECT DISTINCT unnest($1::text[]) ORDER BY 1 ON CONFLICT DO NOTHING',
    [good.map((r) => r.inbox)],
  );
  return inTransaction(db, async (client) => {
    // Each batch is atomic and the ledger is in it, so a crash that loses the last commits only makes the
    // next run redo those batches: no need to wait for the WAL flush.
    await client.query('SET LOCAL synchronous_commit TO off');
    let stored = 0;
    if (good.length > 0) {
      await client.query(`
        CREATE TEMP TABLE staging (
          inbox text, folder text, source text, message_id text, digest text, subject text, from_address text,
          from_name text, date timestamptz, body text, recipients jsonb, note text
        ) ON COMMIT DROP`);
      const rows = good.map((r) => {
        const e = r.email;
        const recipients = [
          ...e.to.map((a) => ({ kind: 'to', ...a })),
          ...e.cc.map((a) => ({ kind: 'cc', ...a })),
          ...e.bcc.map((a) => ({ kind: 'bcc', ...a })),
        ];
        const content = [e.subject, e.from.address, e.from.name, e.date.toISOString(), e.body];
        const recipientsJson = JSON.stringify(recipients);
        const digest = createHash('sha256')
          .update(JSON.stringify([...content, recipientsJson]))
          .digest('hex');
        const fields = [r.inbox, r.folder, r.source, e.messageId, digest, ...content, recipientsJson];
        const note = r.notes?.length ? copyField(r.notes.join('; ')) : '\\N';
        return fields.map(copyField).join('\t') + '\t' + note + '\n';
      });
      // One chunk: a COPY message and a socket write per batch, not per row.
      await pipeline(Readable.from([rows.join('')]), client.query(copyFrom('COPY staging FROM STDIN')));
      await turn?.after;
      const inserted = await client.query(`
        INSERT INTO emails (message_id, digest, subject, from_address, from_name, date, body, folder, source_file)
        SELECT DISTINCT ON (message_id, digest)
               message_id, digest, subject, from_address, from_name, date, body, folder, source
        FROM staging ORDER BY message_id, digest, source
        ON CONFLICT (message_id, digest) DO NOTHING`);
      turn?.done();
      stored = inserted.rowCount ?? 0;
      // Recipients only for the emails this batch created (found by their identity, which is indexed, and
      // matched by their first-seen source file).
      await client.query(`
        INSERT INTO recipients (email_id, kind, address, name)
        SELECT e.id, r.kind, r.address, r.name
        FROM staging s JOIN emails e USING (message_id, digest),
             jsonb_to_recordset(s.recipients) AS r(kind text, address text, name text)
        WHERE e.source_file = s.source
        ON CONFLICT DO NOTHING`);
      await client.query(`
        INSERT INTO mailbox_messages (inbox_id, email_id, date, folder, tsv)
        SELECT s.inbox, e.id, e.date, s.folder, evalrl_search_vector(e.subject, e.body)
        FROM staging s JOIN emails e USING (message_id, digest)
        ON CONFLICT DO NOTHING`);
      await client.query(`
        INSERT INTO ingest_sources (source_file, inbox_id, status, message_id, reason)
        SELECT s.source, s.inbox, CASE WHEN e.source_file = s.source THEN 'stored' ELSE 'duplicate' END, s.message_id, s.note
        FROM staging s JOIN emails e USING (message_id, digest)
        ON CONFLICT DO NOTHING`);
    }
    if (bad.length > 0) {
      await client.query(
        `INSERT INTO ingest_sources (source_file, inbox_id, status, reason)
         SELECT source, inbox, 'rejected', reason FROM unnest($1::text[], $2::text[], $3::text[]) AS t(source, inbox, reason)
         ON CONFLICT DO NOTHING`,
        [bad.map((r) => r.source), bad.map((r) => r.inbox), bad.map((r) => (r.ok ? '' : r.reason))],
      );
    }
    const rejects = bad.map((r) => ({ source: r.source, reason: r.ok ? '' : r.reason }));
    const notes = good.flatMap((r) =>
      r.ok && r.notes?.length ? [{ source: r.source, note: r.notes.join('; ') }] : [],
    );
    return { stored, duplicates: good.length - stored, rejects, notes };
  }).finally(() => turn?.done());
}

export async function ingestedSources(db: Db): Promise<Set<string>> {
  const { rows } = await db.query<{ source_file: string }>('SELECT source_file FROM ingest_sources');
  return new Set(rows.map((r) => r.source_file));
}

/**
 * An inbox's own address: the sender it uses most in its sent folders, else the address most of its mail
 * is sent to. Search and read_email scope by inbox id; the address is what the agent is told it is.
 */
export async function deriveInboxAddresses(db: Db, inboxes: string[]) {
  await db.query(
    `
    UPDATE inboxes i SET address = best.address FROM (
      SELECT DISTINCT ON (inbox_id) inbox_id, address FROM (
        SELECT m.inbox_id, e.from_address AS address, count(*) * 1000 AS weight
        FROM mailbox_messages m JOIN emails e ON e.id = m.email_id
        WHERE m.inbox_id = ANY($1) AND m.folder ILIKE '%sent%' GROUP BY 1, 2
        UNION ALL
        SELECT m.inbox_id, r.address, count(*) FROM mailbox_messages m JOIN recipients r ON r.email_id = m.email_id
        WHERE m.inbox_id = ANY($1) GROUP BY 1, 2
      ) candidates ORDER BY inbox_id, weight DESC, address
    ) best WHERE i.id = best.inbox_id AND i.address IS DISTINCT FROM best.address`,
    [inboxes],
  );
}
