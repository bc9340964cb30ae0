/**
 * bench/search: ingest throughput and search latency at the size of the full Enron release.
 *
 * The 2,195 real emails are recombined (subject of one, body of another, sender and recipients of a third)
 * into ~500k synthetic ones with fresh ids and dates, spread over 150 mailboxes like the release's users,
 * written as mbox files and ingested through evalrl's real ingest path. The same mail goes into an SQLite
 * FTS5 index (ART·E's approach); one fixed set of realistic keyword queries, with inbox and date filters,
 * runs against both. Writes bench/results/search.json.
 *
 *   make bench-search            (EMAILS=50000 make bench-search for a quicker run)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { loadConfig } from '../src/config';
import type { Email } from '../src/mail/email';
import { ingest } from '../src/mail/ingest';
import { parseMessage } from '../src/mail/parse';
import { readMaildir, readMbox } from '../src/mail/sources';
import type { Db } from '../src/store/db';
import { searchEmails } from '../src/store/mailbox';
import { withBenchPostgres } from './benchStack';
import { mergeResult, mulberry32, percentile, processTreeCpuSeconds } from './util';

const TARGET_EMAILS = Number(process.env.EMAILS ?? 500_000);
const INBOXES = 150;
const QUERIES = 300;
const STOP = new Set(
  'this that with from have will your they been were would there their what about which when could other into than then them these some more also just only please thanks'.split(
    ' ',
  ),
);

interface SynthEmail extends Email {
  inbox: string;
}

async function loadRealEmails(maildir: string): Promise<Email[]> {
  const emails: Email[] = [];
  for await (const message of readMaildir(maildir)) {
    const parsed = await parseMessage(message);
    if (parsed.ok) emails.push(parsed.email);
  }
  return emails;
}

function rfc822(e: SynthEmail): string {
  const body = e.body.replace(/^(>*From )/gm, '>$1');
  return [
    `From bench@evalrl ${e.date.toUTCString()}`,
    `Message-ID: ${e.messageId}`,
    `Date: ${e.date.toUTCString()}`,
    `From: ${e.from.address}`,
    `To: ${e.to.map((a) => a.address).join(', ') || 'undisclosed@enron.com'}`,
    `Subject: ${e.subject}`,
    'Content-Type: text/plain; charset=utf-8',
    '',
    body,
    '',
  ].join('\n');
}

/** Writes one mbox per synthetic inbox and fills the SQLite index with the same mail. */
function synthesise(
  real: Email[],
  dir: string,
  sqlite: Database.Database,
): { files: { file: string; inbox: string }[] } {
  const rand = mulberry32(42);
  const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)];
  sqlite.exec(`
    CREATE TABLE emails (id INTEGER PRIMARY KEY, message_id TEXT UNIQUE, subject TEXT, from_address TEXT, date TEXT, body TEXT);
    CREATE TABLE mailbox (inbox TEXT, email_id INTEGER, date TEXT, PRIMARY KEY (inbox, email_id));
    CREATE INDEX mailbox_date ON mailbox (inbox, date);
    CREATE TABLE recipients (email_id INTEGER, address TEXT);
    CREATE INDEX recipients_address ON recipients (address, email_id);`);
  const insertEmail = sqlite.prepare('INSERT INTO emails VALUES (?, ?, ?, ?, ?, ?)');
  const insertMailbox = sqlite.prepare('INSERT INTO mailbox VALUES (?, ?, ?)');
  const insertRecipient = sqlite.prepare('INSERT INTO recipients VALUES (?, ?)');
  const perInbox = Math.ceil(TARGET_EMAILS / INBOXES);
  const start = new Date('1999-01-01').getTime();
  const span = new Date('2002-06-30').getTime() - start;
  const files: { file: string; inbox: string }[] = [];
  let id = 0;
  for (let b = 0; b < INBOXES && id < TARGET_EMAILS; b++) {
    const inbox = `bench-${String(b).padStart(3, '0')}`;
    const file = path.join(dir, `${inbox}.mbox`);
    const out = fs.openSync(file, 'w');
    sqlite.transaction(() => {
      for (let i = 0; i < perInbox && id < TARGET_EMAILS; i++) {
        const [a, s, h] = [pick(real), pick(real), pick(real)];
        const e: SynthEmail = {
          ...h,
          inbox,
          messageId: `<bench.${++id}@evalrl>`,
          subject: s.subject,
          body: a.body,
          date: new Date(start + Math.floor((rand() * span) / 60000) * 60000),
        };
        fs.writeSync(out, rfc822(e));
        const date = e.date.toISOString();
        insertEmail.run(id, e.messageId, e.subject, e.from.address, date, e.body);
        insertMailbox.run(inbox, id, date);
        for (const r of e.to) insertRecipient.run(id, r.address);
      }
    })();
    fs.closeSync(out);
    files.push({ file, inbox });
  }
  sqlite.exec(`
    CREATE VIRTUAL TABLE emails_fts USING fts5(subject, body, content='emails', content_rowid='id');
    INSERT INTO emails_fts(emails_fts) VALUES ('rebuild');`);
  return { files };
}

interface Query {
  inbox: string;
  keywords: string[];
  before: Date;
  from?: string;
}

/** Realistic queries: 1–3 content words of a real email of the inbox, before a query date, sometimes a sender. */
function makeQueries(sqlite: Database.Database): Query[] {
  const rand = mulberry32(7);
  const count = (sqlite.prepare('SELECT count(*) AS n FROM emails').get() as { n: number }).n;
  const get = sqlite.prepare(
    'SELECT e.subject, e.body, e.from_address, e.date, m.inbox FROM emails e JOIN mailbox m ON m.email_id = e.id WHERE e.id = ?',
  );
  const queries: Query[] = [];
  while (queries.length < QUERIES) {
    const row = get.get(1 + Math.floor(rand() * count)) as {
      subject: string;
      body: string;
      from_address: string;
      date: string;
      inbox: string;
    };
    const words = [
      ...new Set(`${row.subject} ${row.body}`.toLowerCase().match(/\b[a-z]{4,12}\b/g) ?? []),
    ].filter((w) => !STOP.has(w));
    if (words.length < 3) continue;
    const n = 1 + Math.floor(rand() * 3);
    const keywords = Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]);
    const before = new Date(new Date(row.date).getTime() + 30 * 24 * 3600 * 1000);
    queries.push({ inbox: row.inbox, keywords, before, from: rand() < 0.25 ? row.from_address : undefined });
  }
  return queries;
}

function sqliteSearch(sqlite: Database.Database) {
  // ART·E-style: FTS5 MATCH with every keyword quoted (so they are data), scoped and ranked by bm25.
  const stmt = sqlite.prepare(`
    SELECT e.message_id, e.subject, e.from_address, e.date, snippet(emails_fts, 1, '**', '**', ' ... ', 15) AS snippet
    FROM emails_fts JOIN emails e ON e.id = emails_fts.rowid JOIN mailbox m ON m.email_id = e.id
    WHERE emails_fts MATCH ? AND m.inbox = ? AND m.date < ? AND (? IS NULL OR e.from_address = ?)
    ORDER BY rank, e.date DESC LIMIT 10`);
  return (q: Query) => {
    const match = q.keywords.map((k) => `"${k.replace(/"/g, '""')}"`).join(' AND ');
    return stmt.all(match, q.inbox, q.before.toISOString(), q.from ?? null, q.from ?? null);
  };
}

async function* allMessages(files: { file: string; inbox: string }[]) {
  for (const { file, inbox } of files) yield* readMbox(file, inbox);
}

/** The PostgreSQL server's process id: the parent of this connection's backend. */
async function postmasterPid(pool: Db): Promise<number> {
  const { rows } = await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return Number(fs.readFileSync(`/proc/${rows[0].pid}/stat`, 'utf8').split(') ')[1].split(' ')[1]);
}

/**
 * Where ingest's CPU goes, per email, on a sample: reading and MIME parsing (one thread, as each parser
 * thread does), then on PostgreSQL's side the search vector and the full-text index's upkeep (the sample's
 * stored rows inserted again into a copy of the table, with and without the index).
 */
async function ingestProfile(pool: Db, files: { file: string; inbox: string }[], sample = 20_000) {
  let parsed = 0;
  const t0 = process.hrtime.bigint();
  for await (const message of allMessages(files)) {
    await parseMessage(message);
    if (++parsed === sample) break;
  }
  const t1 = process.hrtime.bigint();
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(length(evalrl_search_vector(subject, body)))::int AS n
     FROM (SELECT subject, body FROM emails ORDER BY id LIMIT $1) AS e`,
    [sample],
  );
  const t2 = process.hrtime.bigint();
  const insertSample = async (withIndex: boolean) => {
    await pool.query('DROP TABLE IF EXISTS gin_probe; CREATE TABLE gin_probe (LIKE mailbox_messages)');
    if (withIndex) await pool.query('CREATE INDEX ON gin_probe USING gin (inbox_id, tsv)');
    const t = process.hrtime.bigint();
    await pool.query('INSERT INTO gin_probe SELECT * FROM mailbox_messages ORDER BY email_id LIMIT $1', [
      sample,
    ]);
    return Number(process.hrtime.bigint() - t) / 1e6 / sample;
  };
  const index = (await insertSample(true)) - (await insertSample(false));
  await pool.query('DROP TABLE gin_probe');
  return {
    read_parse_ms_per_email: Number(t1 - t0) / 1e6 / parsed,
    search_vector_ms_per_email: Number(t2 - t1) / 1e6 / rows[0].n,
    search_index_ms_per_email: index,
  };
}

async function timeAll(
  queries: Query[],
  run: (q: Query) => unknown,
): Promise<{ p50_ms: number; p95_ms: number; hits: number }> {
  for (const q of queries.slice(0, 30)) await run(q); // warm caches
  const times: number[] = [];
  let hits = 0;
  for (const q of queries) {
    const t = process.hrtime.bigint();
    const rows = (await run(q)) as unknown[];
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
    hits += rows.length;
  }
  return { p50_ms: percentile(times, 50), p95_ms: percentile(times, 95), hits };
}

async function main() {
  const maildir = loadConfig().maildir;
  console.log(`bench/search: ${TARGET_EMAILS} emails in ${INBOXES} mailboxes, recombined from ${maildir}`);
  const real = await loadRealEmails(maildir);
  await withBenchPostgres('search', '35433', async (pool, work) => {
    const sqlite = new Database(path.join(work, 'fts.sqlite'));
    try {
      sqlite.pragma('journal_mode = WAL');
      const { files } = synthesise(real, work, sqlite);
      console.log(`synthesised ${files.length} mbox files`);
      const postgres = await postmasterPid(pool);
      const cpuBefore = { evalrl: process.cpuUsage(), postgres: processTreeCpuSeconds(postgres) };
      const started = Date.now();
      const { stored } = await ingest(pool, allMessages(files));
      const seconds = (Date.now() - started) / 1000;
      const evalrlCpu = process.cpuUsage(cpuBefore.evalrl);
      const cpu = {
        evalrl: (evalrlCpu.user + evalrlCpu.system) / 1000 / stored,
        postgres: ((processTreeCpuSeconds(postgres) - cpuBefore.postgres) * 1000) / stored,
      };
      const ingestRate = stored / seconds;
      const cores = os.availableParallelism();
      const bound = (cores * 1000) / (cpu.evalrl + cpu.postgres);
      await pool.query('VACUUM ANALYZE');
      console.log(
        `ingest: ${stored} emails in ${seconds.toFixed(1)}s = ${ingestRate.toFixed(0)} emails/s (target >= 2500)`,
      );
      const profile = await ingestProfile(pool, files);
      console.log(
        `ingest CPU per email: evalrl ${cpu.evalrl.toFixed(3)} ms (of which reading and parsing ` +
          `${profile.read_parse_ms_per_email.toFixed(3)}), PostgreSQL ${cpu.postgres.toFixed(3)} ms (of which the ` +
          `search vector ${profile.search_vector_ms_per_email.toFixed(3)} and its index ` +
          `${profile.search_index_ms_per_email.toFixed(3)}): ${cores} cores bound ingest at ${bound.toFixed(0)} ` +
          `emails/s, and it ran at ${((100 * ingestRate) / bound).toFixed(0)} % of that`,
      );

      const queries = makeQueries(sqlite);
      const pg = await timeAll(queries, (q) =>
        searchEmails(pool, { inbox: q.inbox, queryDate: q.before }, { keywords: q.keywords, from: q.from }),
      );
      const lite = await timeAll(queries, sqliteSearch(sqlite));
      const ratio = pg.p50_ms / lite.p50_ms;
      console.log(
        `search p50/p95: PostgreSQL ${pg.p50_ms.toFixed(2)}/${pg.p95_ms.toFixed(2)} ms, SQLite FTS5 ${lite.p50_ms.toFixed(2)}/${lite.p95_ms.toFixed(2)} ms`,
      );
      console.log(`ratio p50 PostgreSQL/SQLite = ${ratio.toFixed(2)} (target <= 2), p95 target <= 20 ms`);
      mergeResult('search', {
        emails: stored,
        inboxes: files.length,
        ingest_emails_per_s: Math.round(ingestRate),
        ingest_seconds: seconds,
        ingest_profile: {
          ...profile,
          cpu_ms_per_email: cpu,
          bound_emails_per_s: Math.round(bound),
        },
        queries: queries.length,
        pg: { p50_ms: pg.p50_ms, p95_ms: pg.p95_ms, hits: pg.hits },
        sqlite: { p50_ms: lite.p50_ms, p95_ms: lite.p95_ms, hits: lite.hits },
        p50_ratio_pg_over_sqlite: ratio,
        cpus: os.cpus().length,
        measured_at: new Date().toISOString(),
      });
    } finally {
      sqlite.close();
    }
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
