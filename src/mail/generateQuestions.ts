import type pg from 'pg';
import { llmQuestions, type Teacher } from './llmQuestions';
import { splitInboxes, storeQuestions, type Question } from './question';
import { templateQuestions, type InboxEmail } from './templateQuestions';

export interface GenerateOptions {
  seed: string;
  testFraction: number;
  /** Given → the LLM generator runs too. */
  teacher?: Teacher;
}

export interface GenerateReport {
  generated: number;
  inserted: number;
  dropped: number;
  splits: Record<string, 'train' | 'test'>;
  perInbox: Record<string, number>;
}

/** Generates questions for every ingested inbox and stores the new ones. */
export async function generateQuestions(pool: pg.Pool, options: GenerateOptions): Promise<GenerateReport> {
  const { rows: inboxes } = await pool.query<{ id: string; address: string | null }>(
    'SELECT id, address FROM inboxes ORDER BY id',
  );
  const splits = splitInboxes(
    inboxes.map((i) => i.id),
    options.testFraction,
    options.seed,
  );
  const report: GenerateReport = {
    generated: 0,
    inserted: 0,
    dropped: 0,
    splits: Object.fromEntries(splits),
    perInbox: {},
  };
  for (const inbox of inboxes) {
    const emails = await inboxEmails(pool, inbox.id);
    const questions: Question[] = templateQuestions(inbox.id, inbox.address, emails);
    if (options.teacher && inbox.address) {
      const llm = await llmQuestions(options.teacher, inbox.id, inbox.address, emails);
      questions.push(...llm.questions);
      report.dropped += llm.dropped;
    }
    report.generated += questions.length;
    report.perInbox[inbox.id] = questions.length;
    report.inserted += await storeQuestions(pool, questions, splits);
  }
  return report;
}

async function inboxEmails(pool: pg.Pool, inbox: string): Promise<InboxEmail[]> {
  const { rows } = await pool.query<InboxEmail>(
    `SELECT e.message_id AS "messageId", e.subject, e.from_address AS "fromAddress", e.date, e.body
     FROM mailbox_messages m JOIN emails e ON e.id = m.email_id WHERE m.inbox_id = $1 ORDER BY e.date, e.message_id`,
    [inbox],
  );
  return rows;
}
