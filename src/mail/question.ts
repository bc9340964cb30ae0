import { createHash } from 'node:crypto';
import { z } from 'zod';
import { checkAnswer } from '../reward/answerMatch';

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
 * A question that states its own answer, as the grader reads it ("What date is given in the email Jane sent me
 * on 2001-11-20?" → "November 20, 2001"): an agent that echoes the question is graded right without finding
 * anything, so the question measures nothing and teaches guessing.
 */
export const givesAwayAnswer = (q: Pick<Question, 'question' | 'answer'>) =>
  checkAnswer(q.question, q.answer).correct;

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
