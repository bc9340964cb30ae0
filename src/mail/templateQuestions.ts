import type { Question } from './question';

/** The fields of one mailbox email that the templates read. */
export interface InboxEmail {
  messageId: string;
  subject: string;
  fromAddress: string;
  date: Date;
  body: string;
}

const DAY_MS = 24 * 3600 * 1000;
const AMOUNT = /\$\s?\d{1,3}(?:,\d{3})+(?:\.\d{2})?|\$\s?\d+(?:\.\d{2})?(?:\s?(?:million|billion|MM|k))?/gi;
const MONTHS = 'January|February|March|April|May|June|July|August|September|October|November|December';
const STATED_DATE = new RegExp(`\\b(?:${MONTHS})\\s+\\d{1,2},\\s+(?:19|20)\\d{2}\\b`, 'g');

const isoDay = (d: Date) => d.toISOString().slice(0, 10);
const normalise = (s: string) => s.replace(/\s+/g, ' ').trim();

/**
 * Question–answer pairs derived from single emails of one mailbox: who sent it, when, what its subject was,
 * a dollar amount or a date stated in its body. A question is made only where its answer is unambiguous in
 * that mailbox: copies of one email (same subject, sender and minute) count as one, and their ids are all
 * gold. The question is asked a week after the email, so the mail is visible to the agent.
 */
export function templateQuestions(
  inbox: string,
  ownerAddress: string | null,
  emails: InboxEmail[],
): Question[] {
  const bySubject = groupBy(emails, (e) => normalise(e.subject).toLowerCase());
  const questions: Question[] = [];
  const ask = (template: string, question: string, answer: string, group: InboxEmail[]) =>
    questions.push({
      question,
      answer,
      messageIds: group.map((e) => e.messageId).sort(),
      inbox,
      queryDate: new Date(group[0].date.getTime() + 7 * DAY_MS),
      source: `template:${template}`,
    });

  for (const [key, group] of bySubject) {
    if (key.length < 6 || !isOneEmail(group)) continue;
    const email = group[0];
    const subject = normalise(email.subject);
    const received = email.fromAddress !== ownerAddress;
    if (received)
      ask('who_sent', `Who sent me the email with the subject "${subject}"?`, email.fromAddress, group);
    ask(
      'when_sent',
      `On what date was the email with the subject "${subject}" sent?`,
      isoDay(email.date),
      group,
    );
    const amounts = distinct(email.body.match(AMOUNT) ?? []);
    if (amounts.length === 1) {
      ask(
        'amount',
        `What dollar amount is mentioned in the email with the subject "${subject}"?`,
        amounts[0],
        group,
      );
    }
    const dates = distinct(email.body.match(STATED_DATE) ?? []);
    if (dates.length === 1) {
      ask('stated_date', `What date is given in the email with the subject "${subject}"?`, dates[0], group);
    }
  }

  // "What was the subject…" needs the (sender, day) pair to pick out a single email.
  const bySenderDay = groupBy(emails, (e) => `${e.fromAddress}\u0000${isoDay(e.date)}`);
  for (const group of bySenderDay.values()) {
    const email = group[0];
    const subject = normalise(email.subject);
    if (subject.length < 6 || email.fromAddress === ownerAddress || !isOneEmail(group)) continue;
    const question = `What was the subject of the email ${email.fromAddress} sent me on ${isoDay(email.date)}?`;
    ask('subject', question, subject, group);
  }
  return questions;
}

/** Copies of one email: the same subject, sender and minute. */
function isOneEmail(group: InboxEmail[]): boolean {
  const first = group[0];
  return group.every(
    (e) =>
      normalise(e.subject).toLowerCase() === normalise(first.subject).toLowerCase() &&
      e.fromAddress === first.fromAddress &&
      Math.abs(e.date.getTime() - first.date.getTime()) < 60_000,
  );
}

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    groups.set(k, [...(groups.get(k) ?? []), item]);
  }
  return groups;
}

const distinct = (values: string[]) => [...new Set(values.map((v) => normalise(v)))];
