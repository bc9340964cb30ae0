import {
  searchArgsSchema,
  type FullEmail,
  type Mailbox,
  type MailboxScope,
  type SearchArgs,
  type SearchHit,
} from '../mail/search';
import { storable, type Db } from './db';

/**
 * Full-text search over one mailbox. Every keyword must match; keywords are plain text for
 * plainto_tsquery, never query syntax, so quotes, operators and SQL arrive as words; like the documents, they
 * are split at the separators inside addresses and URLs (migration 008), so "rapp" finds bill.rapp@enron.com. A keyword with no
 * searchable word in it (empty, punctuation, stop words) constrains nothing. Keywords match by their stems;
 * emails that hold every keyword as written come first (migrations 011, 013), then by relevance, newest first on ties.
 */
export async function searchEmails(db: Db, scope: MailboxScope, input: SearchArgs): Promise<SearchHit[]> {
  const args = searchArgsSchema.parse(input);
  const keywords = args.keywords.map(storable).filter((k) => k.trim() !== '');
  const before = minDate(args.sent_before ? new Date(args.sent_before) : undefined, scope.queryDate);
  const params: unknown[] = [scope.inbox, before ?? null, args.sent_after ? new Date(args.sent_after) : null];
  params.push(
    args.from ? storable(args.from.toLowerCase()) : null,
    args.to ? storable(args.to.toLowerCase()) : null,
    args.limit,
  );
  const texts = keywords.map((k) => `evalrl_search_text($${params.push(k)})`);
  const tsquery = (config: string) =>
    texts.length === 0 ? `''::tsquery` : texts.map((t) => `plainto_tsquery('${config}', ${t})`).join(' && ');
  const { rows } = await db.query<SearchHit & { date: Date }>(
    `WITH q AS (SELECT ${tsquery('english')} AS query, evalrl_as_written(${tsquery('evalrl_unstemmed')}) AS exact),
     top AS (
       -- Only the index-carrying mailbox rows are ranked; emails are read for the ≤ limit winners alone.
       SELECT m.email_id, m.date,
              CASE WHEN numnode(q.query) = 0 THEN 0 ELSE ts_rank(m.tsv, q.query) END AS rank,
              numnode(q.exact) > 0 AND m.tsv @@ q.exact AS exact
       FROM mailbox_messages m, q
       WHERE m.inbox_id = $1
         AND ($2::timestamptz IS NULL OR m.date < $2) AND ($3::timestamptz IS NULL OR m.date >= $3)
         AND (numnode(q.query) = 0 OR m.tsv @@ q.query)
         AND ($4::text IS NULL OR EXISTS (SELECT 1 FROM emails f WHERE f.id = m.email_id AND f.from_address = $4))
         AND ($5::text IS NULL OR EXISTS (SELECT 1 FROM recipients r WHERE r.email_id = m.email_id AND r.address = $5))
       ORDER BY exact DESC, rank DESC, m.date DESC, m.email_id
       LIMIT $6)
     SELECT e.message_id, e.id::text AS email_id, e.subject, e.from_address AS from, e.date,
            ts_headline('english', left(e.body, 20000), q.query,
                        'MaxFragments=1, MaxWords=24, MinWords=8, StartSel=**, StopSel=**') AS snippet
     FROM top JOIN emails e ON e.id = top.email_id, q
     ORDER BY top.exact DESC, top.rank DESC, top.date DESC, e.id`,
    params,
  );
  return rows.map((r) => ({
    ...r,
    date: r.date.toISOString(),
    snippet: r.snippet.replace(/\s+/g, ' ').trim(),
  }));
}

/** One whole email, only if it is in this mailbox (and not after the query date): otherwise null, "not found". */
export async function readEmail(
  db: Db,
  scope: MailboxScope,
  messageId: string,
  emailId?: string,
): Promise<FullEmail | null> {
  const { rows } = await db.query(
    `SELECT e.message_id, e.id::text AS email_id, e.subject, e.from_address AS from, e.date, e.body,
            coalesce(array_agg(r.address ORDER BY r.address) FILTER (WHERE r.kind = 'to'), '{}') AS to,
            coalesce(array_agg(r.address ORDER BY r.address) FILTER (WHERE r.kind = 'cc'), '{}') AS cc,
            coalesce(array_agg(r.address ORDER BY r.address) FILTER (WHERE r.kind = 'bcc'), '{}') AS bcc
     FROM mailbox_messages m JOIN emails e ON e.id = m.email_id LEFT JOIN recipients r ON r.email_id = e.id
     WHERE m.inbox_id = $1 AND e.message_id = $2 AND ($3::timestamptz IS NULL OR m.date < $3)
       AND ($4::bigint IS NULL OR e.id = $4)
     GROUP BY e.id ORDER BY e.id LIMIT 1`, // two different emails, one Message-ID: emailId picks, else the first stored
    [
      scope.inbox,
      storable(messageId.trim()),
      scope.queryDate ?? null,
      emailId && /^\d{1,18}$/.test(emailId) ? emailId : null,
    ],
  );
  if (rows.length === 0) return null;
  const row = rows[0];
  return { ...row, date: (row.date as Date).toISOString() };
}

function minDate(a?: Date, b?: Date): Date | undefined {
  if (!a) return b;
  if (!b) return a;
  return a < b ? a : b;
}

/** The mailbox as the agent's tools see it, over this database. */
export const mailboxOf = (db: Db): Mailbox => ({
  search: (scope, args) => searchEmails(db, scope, args),
  read: (scope, messageId, emailId) => readEmail(db, scope, messageId, emailId),
});
