import { createHash } from 'node:crypto';
import type pg from 'pg';
import { z } from 'zod';

export const questionSchema = z.object({
  question: z.string().min(8),
  answer: z.string().min(1),
  messageIds: z.array(z.string().min(1)).min(1),
  inbox: z.string().min(1),
  queryDate: z.date(),
  source: z.string().min(1),
  howRealistic: z.number().min(0).max(1).optional(),
});
export type Question = z.infer<typeof questionSchema>;
export type Split = 'train' | 'test';

/** Stable id: the same question from the same source is stored once, however often generation runs. */
export function questionId(q: Pick<Question, 'source' | 'inbox' | 'question' | 'messageIds'>): string {
  const key = [q.source, q.inbox, q.question, ...[...q.messageIds].sort()].join('\u0000');
  return createHash('sha256').update(key).digest('hex').slice(0, 24);
}

/**
 * Whole inboxes go to one split, so test questions are asked over mailboxes the policy never trained on.
 * The assignment is a seeded hash order: the same seed and inboxes always give the same split.
 */
export function splitInboxes(inboxes: string[], testFraction: number, seed: string): Map<string, Split> {
  const order = [...inboxes].sort((a, b) => hash(seed + a).localeCompare(hash(seed + b)));
  const testCount = inboxes.length < 2 ? 0 : Math.max(1, Math.round(inboxes.length * testFraction));
  return new Map(order.map((inbox, i) => [inbox, i < testCount ? 'test' : 'train']));
}

const hash = (s: string) => createHash('sha256').update(s).digest('hex');

/** Inserts new questions; returns how many were new. */
export async function storeQuestions(pool: pg.Pool, questions: Question[], splits: Map<string, Split>) {
  if (questions.length === 0) return 0;
  const result = await pool.query(
    `INSERT INTO questions (id, question, answer, message_ids, inbox_id, query_date, split, source, how_realistic)
     SELECT t.id, t.question, t.answer, string_to_array(t.ids, E'\\x1f'), t.inbox, t.query_date, t.split, t.source, t.how
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::text[], $9::real[])
          AS t(id, question, answer, ids, inbox, query_date, split, source, how)
     ON CONFLICT (id) DO NOTHING`,
    [
      questions.map(questionId),
      questions.map((q) => q.question),
      questions.map((q) => q.answer),
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
