/**
 * bench/recall: does search find a rare word's email? Recall@10 on real mail, evalrl's PostgreSQL search
 * against SQLite FTS5 with its default unicode61 tokenizer (ART·E's index), on the same emails and queries.
 *
 * Each query is one rare word (in at most 3 emails of its inbox) drawn from a real email's body, searched
 * in that inbox; it is a hit when that email is in the top 10. Half the words are parts of an email address,
 * host name or URL (`name@domain`, `www.site.co.uk/...`), which people and agents search for. Adds
 * `recall_at_10: {pg, sqlite}` to bench/results/search.json.
 *
 *   make bench-recall            (EVALRL_MAILDIR=… for other mail)
 */
import path from 'node:path';
import Database from 'better-sqlite3';
import { loadConfig } from '../src/config';
import type { Email } from '../src/mail/email';
import { ingest } from '../src/mail/ingest';
import { parseMessage } from '../src/mail/parse';
import { readMaildir } from '../src/mail/sources';
import { searchEmails } from '../src/store/mailbox';
import { withBenchPostgres } from './benchStack';
import { mergeResult, mulberry32 } from './util';

const QUERIES_PER_KIND = Number(process.env.QUERIES ?? 150);
const RARE = 3; // a word in at most this many emails of its inbox
const FAR_FUTURE = new Date('2100-01-01');

interface Stored {
  inbox: string;
  email: Email;
}
interface Query {
  inbox: string;
  word: string;
  messageId: string;
  inAddress: boolean;
}

/** Words as unicode61 splits them: runs of letters and digits, lower-cased. */
const words = (text: string) => text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
/** The parts of the body's addresses, host names and URLs. */
const addressWords = (text: string) =>
  new Set(words((text.match(/\S+@\S+\.\S+|\bwww\.\S+|\bhttps?:\/\/\S+/gi) ?? []).join(' ')));
const searchable = (w: string) => w.length >= 4 && !/^\d+$/.test(w);

async function loadMail(maildir: string): Promise<Stored[]> {
  const seen = new Set<string>();
  const mail: Stored[] = [];
  for await (const message of readMaildir(maildir)) {
    const parsed = await parseMessage(message);
    const key = parsed.ok ? `${parsed.inbox}\n${parsed.email.messageId}` : '';
    if (parsed.ok && !seen.has(key)) mail.push({ inbox: parsed.inbox, email: parsed.email });
    seen.add(key);
  }
  return mail;
}

/** Rare words of real emails, as many inside addresses and URLs as outside them. */
function makeQueries(mail: Stored[]): Query[] {
  const frequency = new Map<string, number>(); // `${inbox} ${word}` → emails holding it
  for (const { inbox, email } of mail)
    for (const w of new Set(words(`${email.subject} ${email.body}`)))
      frequency.set(`${inbox} ${w}`, (frequency.get(`${inbox} ${w}`) ?? 0) + 1);
  const rand = mulberry32(11);
  const queries: Query[] = [];
  const used = new Set<string>();
  for (const inAddress of [true, false]) {
    for (let tries = 0; queries.filter((q) => q.inAddress === inAddress).length < QUERIES_PER_KIND; tries++) {
      if (tries > 100 * QUERIES_PER_KIND) break;
      const { inbox, email } = mail[Math.floor(rand() * mail.length)];
      const parts = addressWords(email.body);
      const candidates = [...new Set(words(email.body))].filter(
        (w) =>
          searchable(w) &&
          parts.has(w) === inAddress &&
          (frequency.get(`${inbox} ${w}`) ?? 0) <= RARE &&
          !used.has(`${inbox} ${w}`),
      );
      if (candidates.length === 0) continue;
      const word = candidates[Math.floor(rand() * candidates.length)];
      used.add(`${inbox} ${word}`);
      queries.push({ inbox, word, messageId: email.messageId, inAddress });
    }
  }
  return queries;
}

function sqliteIndex(mail: Stored[], file: string) {
  const sqlite = new Database(file);
  sqlite.exec(`
    CREATE TABLE emails (id INTEGER PRIMARY KEY, inbox TEXT, message_id TEXT, subject TEXT, body TEXT);
    CREATE VIRTUAL TABLE emails_fts USING fts5(subject, body, content='emails', content_rowid='id');`);
  const insert = sqlite.prepare('INSERT INTO emails (inbox, message_id, subject, body) VALUES (?, ?, ?, ?)');
  sqlite.transaction(() => {
    for (const { inbox, email } of mail) insert.run(inbox, email.messageId, email.subject, email.body);
  })();
  sqlite.exec(`INSERT INTO emails_fts(emails_fts) VALUES ('rebuild')`);
  const search = sqlite.prepare(`
    SELECT e.message_id FROM emails_fts JOIN emails e ON e.id = emails_fts.rowid
    WHERE emails_fts MATCH ? AND e.inbox = ? ORDER BY rank LIMIT 10`);
  return {
    top10: (q: Query) =>
      (search.all(`"${q.word}"`, q.inbox) as { message_id: string }[]).map((r) => r.message_id),
    close: () => sqlite.close(),
  };
}

function recall(queries: Query[], hits: boolean[]) {
  const share = (keep: (q: Query) => boolean) => {
    const picked = hits.filter((_, i) => keep(queries[i]));
    return Number((picked.filter(Boolean).length / picked.length).toFixed(3));
  };
  return {
    all: share(() => true),
    in_addresses: share((q) => q.inAddress),
    elsewhere: share((q) => !q.inAddress),
  };
}

async function main() {
  const maildir = loadConfig().maildir;
  const mail = await loadMail(maildir);
  const queries = makeQueries(mail);
  console.log(`bench/recall: ${queries.length} rare-word queries over ${mail.length} emails of ${maildir}`);
  await withBenchPostgres('recall', '35434', async (pool, work) => {
    await ingest(pool, readMaildir(maildir));
    const sqlite = sqliteIndex(mail, path.join(work, 'fts.sqlite'));
    const pgHits: boolean[] = [];
    for (const q of queries) {
      const scope = { inbox: q.inbox, queryDate: FAR_FUTURE };
      const found = await searchEmails(pool, scope, { keywords: [q.word], limit: 10 });
      pgHits.push(found.some((h) => h.message_id === q.messageId));
    }
    const liteHits = queries.map((q) => sqlite.top10(q).includes(q.messageId));
    sqlite.close();
    const pg = recall(queries, pgHits);
    const lite = recall(queries, liteHits);
    console.log(`recall@10 PostgreSQL ${JSON.stringify(pg)}`);
    console.log(`recall@10 SQLite FTS5 unicode61 ${JSON.stringify(lite)}`);
    console.log(`ratio PostgreSQL/SQLite = ${(pg.all / lite.all).toFixed(3)} (target >= 1)`);
    const misses = queries.filter((_, i) => !pgHits[i]).map((q) => q.word);
    console.log(`PostgreSQL misses: ${misses.slice(0, 30).join(' ') || 'none'}`);
    mergeResult('search', {
      recall_at_10: { pg: pg.all, sqlite: lite.all },
      recall: {
        queries: queries.length,
        emails: mail.length,
        pg,
        sqlite: lite,
        ratio_pg_over_sqlite: Number((pg.all / lite.all).toFixed(3)),
        measured_at: new Date().toISOString(),
      },
    });
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
