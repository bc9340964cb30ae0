import type { Gold } from '../reward/deterministic';
import { questionId, type Question, type Split } from '../mail/question';
import type { InboxEmail } from '../mail/templateQuestions';
import type { MailboxScope } from '../mail/search';
import { storable, type Db } from './db';

/** A question as an episode needs it: the text, the gold answer, and the mailbox scope it is asked in. */
export interface QuestionContext {
  id: string;
  question: string;
  gold: Gold;
  inbox: string;
  inboxAddress: string | null;
  queryDate: Date;
  scope: MailboxScope;
}

export async function questionContext(db: Db, id: string): Promise<QuestionContext | null> {
  const { rows } = await db.query(
    `SELECT q.question, q.answer, q.message_ids, q.inbox_id, q.query_date, i.address
     FROM questions q JOIN inboxes i ON i.id = q.inbox_id WHERE q.id = $1`,
    [id],
  );
  if (rows.length === 0) return null;
  const q = rows[0];
  return {
    id,
    question: q.question,
    gold: { answer: q.answer, messageIds: q.message_ids },
    inbox: q.inbox_id,
    inboxAddress: q.address,
    queryDate: q.query_date,
    scope: { inbox: q.inbox_id, queryDate: q.query_date },
  };
}

export async function questionIds(db: Db, split: Split): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM questions WHERE split = $1 ORDER BY id', [
    split,
  ]);
  return rows.map((r) => r.id);
}

/** Ids with how each question was made (its template, or the LLM generator). */
export async function questionSources(db: Db, split: Split): Promise<{ id: string; source: string }[]> {
  const { rows } = await db.query('SELECT id, source FROM questions WHERE split = $1 ORDER BY id', [split]);
  return rows;
}

export async function questionCounts(db: Db): Promise<Record<Split, number>> {
  const { rows } = await db.query<{ split: Split; n: string }>(
    'SELECT split, count(*) AS n FROM questions GROUP BY split',
  );
  const count = (split: Split) => Number(rows.find((r) => r.split === split)?.n ?? 0);
  return { train: count('train'), test: count('test') };
}

/** Inserts new questions; returns how many were new. */
export async function insertQuestions(db: Db, questions: Question[], splits: Map<string, Split>) {
  if (questions.length === 0) return 0;
  const result = await db.query(
    `INSERT INTO questions (id, question, answer, message_ids, inbox_id, query_date, split, source, how_realistic)
     SELECT t.id, t.question, t.answer, string_to_array(t.ids, E'\\x1f'), t.inbox, t.query_date, t.split, t.source, t.how
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::text[], $9::real[])
          AS t(id, question, answer, ids, inbox, query_date, split, source, how)
     ON CONFLICT (id) DO NOTHING`,
    [
      questions.map(questionId),
      questions.map((q) => storable(q.question)),
      questions.map((q) => storable(q.answer)),
      questions.map((q) => q.messageIds.join('\u001f')),
      questions.map((q) => q.inbox),
      questions.map((q) => q.queryDate),
      questions.map((q) => splits.get(q.inbox) ?? 'train'),
      questions.map((q) => q.source),
      questions.map((q) => q.howRealistic ?? null),
    ],
  );
  return result.rowCount ?? 0;
}

export async function inboxes(db: Db): Promise<{ id: string; address: string | null }[]> {
  const { rows } = await db.query('SELECT id, address FROM inboxes ORDER BY id');
  return rows;
}

/** Every email of one mailbox, oldest first: what the question templates read. */
export async function inboxEmails(db: Db, inbox: string): Promise<InboxEmail[]> {
  const { rows } = await db.query<InboxEmail>(
    `SELECT e.message_id AS "messageId", e.subject, e.from_address AS "fromAddress", e.date, e.body
     FROM mailbox_messages m JOIN emails e ON e.id = m.email_id WHERE m.inbox_id = $1 ORDER BY e.date, e.message_id`,
    [inbox],
  );
  return rows;
}
