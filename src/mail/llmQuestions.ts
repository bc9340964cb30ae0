import { z } from 'zod';
import { askTeacher, parseTeacherReply, type TeacherEndpoint } from '../reward/teacherClient';
import { givesAwayAnswer, type Question } from './question';
import type { InboxEmail } from './templateQuestions';

const replySchema = z.object({
  questions: z.array(
    z.object({
      question: z.string().min(8),
      answer: z.string().min(1),
      message_ids: z.array(z.string()).min(1),
      how_realistic: z.number().min(0).max(1),
    }),
  ),
});

const BODY_CHARS = 1500;

/** The ART·E-style prompt: a batch of one inbox's mail → questions its owner might really ask. */
export function questionPrompt(ownerAddress: string, emails: InboxEmail[]): string {
  const listing = emails
    .map((e) =>
      [
        `<email message_id="${e.messageId}">`,
        `From: ${e.fromAddress}`,
        `Date: ${Number.isNaN(e.date.getTime()) ? 'unknown' : e.date.toISOString()}`,
        `Subject: ${e.subject}`,
        e.body.slice(0, BODY_CHARS),
        '</email>',
      ].join('\n'),
    )
    .join('\n');
  return [
    `You write evaluation questions for an email-search assistant working for ${ownerAddress}.`,
    'From the emails below, write questions the owner might realistically ask about their own mail, each answerable',
    'from one or a few of these emails alone, with a short factual answer.',
    'Reply with JSON only: {"questions": [{"question": "...", "answer": "...", "message_ids": ["<id>"],',
    '"how_realistic": 0.0-1.0}]}; message_ids must be ids of the emails that contain the answer.',
    '',
    listing,
  ].join('\n');
}

export interface QuestionBatch {
  questions: Question[];
  /** Malformed items, or items citing ids not in the batch. */
  dropped: number;
  /** Items the teacher itself rated less realistic than the threshold. */
  unrealistic: number;
}

/**
 * Parses a teacher's reply. Items that are malformed, cite ids not in the batch or state their own answer are
 * dropped (counted), so a sloppy reply costs questions, not the run; items rated below `minRealism` are left
 * out (counted).
 */
export function parseQuestionReply(
  reply: string,
  inbox: string,
  batch: InboxEmail[],
  model: string,
  minRealism: number,
): QuestionBatch {
  const parsed = parseTeacherReply(reply, replySchema);
  if (!parsed) return { questions: [], dropped: 1, unrealistic: 0 };
  const byId = new Map(batch.map((e) => [e.messageId, e]));
  const questions: Question[] = [];
  let unrealistic = 0;
  for (const item of parsed.questions) {
    const cited = item.message_ids.map((id) => byId.get(id));
    if (cited.some((e) => e === undefined) || givesAwayAnswer(item)) continue;
    if (item.how_realistic < minRealism) {
      unrealistic++;
      continue;
    }
    const latest = Math.max(...cited.map((e) => e!.date.getTime()));
    questions.push({
      question: item.question,
      answer: item.answer,
      messageIds: [...new Set(item.message_ids)].sort(),
      inbox,
      queryDate: new Date(latest + 7 * 24 * 3600 * 1000),
      source: `llm:${model}`,
      howRealistic: item.how_realistic,
    });
  }
  return { questions, dropped: parsed.questions.length - questions.length - unrealistic, unrealistic };
}

/** Asks the teacher for questions over batches of one inbox's mail. */
export async function llmQuestions(
  teacher: TeacherEndpoint,
  inbox: string,
  ownerAddress: string,
  emails: InboxEmail[],
  minRealism: number,
  batchSize = 20,
): Promise<QuestionBatch> {
  const result: QuestionBatch = { questions: [], dropped: 0, unrealistic: 0 };
  for (let i = 0; i < emails.length; i += batchSize) {
    const batch = emails.slice(i, i + batchSize);
    const reply = await askTeacher(teacher, questionPrompt(ownerAddress, batch), replySchema, 'questions');
    const parsed = parseQuestionReply(reply, inbox, batch, teacher.model, minRealism);
    result.questions.push(...parsed.questions);
    result.dropped += parsed.dropped;
    result.unrealistic += parsed.unrealistic;
  }
  return result;
}
