import type { TeacherEndpoint } from '../reward/teacherClient';
import type { Store } from '../store';
import { llmQuestions } from './llmQuestions';
import { splitInboxes, type Question } from './question';
import { templateQuestions } from './templateQuestions';

export interface GenerateOptions {
  seed: string;
  testFraction: number;
  /** Given → the LLM generator runs too. */
  teacher?: TeacherEndpoint;
  /** LLM questions the teacher rates less realistic than this (how_realistic, 0–1) are left out. */
  minRealism?: number;
}

export const DEFAULT_MIN_REALISM = 0.5;

export interface GenerateReport {
  generated: number;
  inserted: number;
  dropped: number;
  unrealistic: number;
  splits: Record<string, 'train' | 'test'>;
  perInbox: Record<string, number>;
}

/** Generates questions for every ingested inbox and stores the new ones. */
export async function generateQuestions(store: Store, options: GenerateOptions): Promise<GenerateReport> {
  const inboxes = await store.questions.inboxes();
  const splits = splitInboxes(
    inboxes.map((i) => i.id),
    options.testFraction,
    options.seed,
  );
  const report: GenerateReport = {
    generated: 0,
    inserted: 0,
    dropped: 0,
    unrealistic: 0,
    splits: Object.fromEntries(splits),
    perInbox: {},
  };
  for (const inbox of inboxes) {
    const emails = await store.questions.inboxEmails(inbox.id);
    const questions: Question[] = templateQuestions(inbox.id, inbox.address, emails);
    if (options.teacher && inbox.address) {
      const llm = await llmQuestions(
        options.teacher,
        inbox.id,
        inbox.address,
        emails,
        options.minRealism ?? DEFAULT_MIN_REALISM,
      );
      questions.push(...llm.questions);
      report.dropped += llm.dropped;
      report.unrealistic += llm.unrealistic;
    }
    report.generated += questions.length;
    report.perInbox[inbox.id] = questions.length;
    report.inserted += await store.questions.insertQuestions(questions, splits);
  }
  return report;
}
