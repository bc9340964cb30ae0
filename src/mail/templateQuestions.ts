import { isoDay } from '../reward/answerMatch';
import { givesAwayAnswer, type Question } from './question';

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

const normalise = (s: string) => s.replace(/\s+/g, ' ').trim();

/**
 * Question–answer pairs derived from single emails of one mailbox: who sent it, when, what its subject was,
 * a dollar amount or a date stated in its body. An email is named three ways: by its subject quoted, by a few
 * of its subject's rarer words (a paraphrase: no quote to paste into a search), or by its sender and day; and
 * a body fact names the email it is in (who sent the email that mentions $X?). A question is made only where
 * its answer is unambiguous in that mailbox: copies of one email (same subject, sender and minute) count as
 * one, and their ids are all gold; and only where the question does not state it (givesAwayAnswer). The
 * question is asked a week after the email, so the mail is visible.
 */
export function templateQuestions(
  inbox: string,
  ownerAddress: string | null,
  allEmails: InboxEmail[],
): Question[] {
  const emails = allEmails.filter((e) => isoDay(e.date) !== ''); // an impossible date names no day
  const bySubject = groupBy(emails, (e) => normalise(e.subject).toLowerCase());
  const questions: Question[] = [];
  const ask = (template: string, question: string, answer: string, group: InboxEmail[]) => {
    if (givesAwayAnswer({ question, answer })) return;
    questions.push({
      question,
      answer,
      messageIds: group.map((e) => e.messageId).sort(),
      inbox,
      queryDate: new Date(group[0].date.getTime() + 7 * DAY_MS),
      source: `template:${template}`,
    });
  };

  // One email's facts, asked about under one of its names; `variant` tells the names apart in `source`.
  const askAbout = (
    email: InboxEmail,
    group: InboxEmail[],
    name: string,
    variant: string,
    bySender = false,
  ) => {
    const facts = bodyFacts(email);
    if (!bySender && email.fromAddress !== ownerAddress)
      ask(`who_sent${variant}`, `Who sent me ${name}?`, email.fromAddress, group);
    if (!bySender) ask(`when_sent${variant}`, `On what date was ${name} sent?`, isoDay(email.date), group);
    if (facts.amount)
      ask(`amount${variant}`, `What dollar amount is mentioned in ${name}?`, facts.amount, group);
    if (facts.statedDate)
      ask(`stated_date${variant}`, `What date is given in ${name}?`, facts.statedDate, group);
  };

  const subjectWords = new WordCounts([...bySubject.values()].map((g) => contentWords(g[0].subject)));
  const mentions = countMentions(emails);
  for (const [key, group] of bySubject) {
    if (key.length < 6 || !isOneEmail(group)) continue;
    const email = group[0];
    askAbout(email, group, `the email with the subject "${normalise(email.subject)}"`, '');
    const topic = topicWords(email.subject, subjectWords);
    if (topic) askAbout(email, group, `the email about ${topic}`, '_topic');
    const { amount, statedDate } = bodyFacts(email);
    const mentioned = amount ?? statedDate;
    if (mentioned && mentions.get(mentioned) === 1 && email.fromAddress !== ownerAddress)
      ask('who_mentioned', `Who sent me the email that mentions ${mentioned}?`, email.fromAddress, group);
  }

  // Named by sender and day, which must pick out a single email.
  const bySenderDay = groupBy(emails, (e) => `${e.fromAddress}\u0000${isoDay(e.date)}`);
  for (const group of bySenderDay.values()) {
    const email = group[0];
    const subject = normalise(email.subject);
    if (subject.length < 6 || email.fromAddress === ownerAddress || !isOneEmail(group)) continue;
    const name = `the email ${email.fromAddress} sent me on ${isoDay(email.date)}`;
    ask('subject', `What was the subject of ${name}?`, subject, group);
    askAbout(email, group, name, '_by_sender', true);
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

// Words too common to name a topic by (the subject's other words are at least three letters long).
const STOP_WORDS = new Set(
  `about after again all also and any are but can could did does for from fwd get had has have her here his how
  into its just let may more new not now off one our out per please re she should some than thanks that the their
  them then there these they this those today too up was were what when where which who why will with would yes
  you your`.split(/\s+/),
);

/** A subject's words, lower case, as topics are made of (and checked against: src/reward/verifiers.ts). */
export const subjectWords = (subject: string): string[] =>
  subject.toLowerCase().match(/[a-z0-9][a-z0-9'&-]*/g) ?? [];

/** A subject's distinct words that say something: without "Re:", "Fw:", numbers and stop words. */
function contentWords(subject: string): string[] {
  return [
    ...new Set(subjectWords(subject).filter((w) => /^[a-z][a-z'&-]{2,}$/.test(w) && !STOP_WORDS.has(w))),
  ];
}

/** In how many of a mailbox's subjects each word appears. */
class WordCounts {
  private readonly counts = new Map<string, number>();
  constructor(private readonly subjects: string[][]) {
    for (const words of subjects) for (const w of words) this.counts.set(w, (this.counts.get(w) ?? 0) + 1);
  }
  count = (word: string) => this.counts.get(word) ?? 0;
  /** How many subjects hold every one of `words`. */
  holding = (words: string[]) => this.subjects.filter((s) => words.every((w) => s.includes(w))).length;
}

/**
 * The fewest of a subject's rarest words (at least two, and fewer than all of them) that no other subject of
 * the mailbox holds together, in the subject's order; null when the subject has too few words for that.
 */
function topicWords(subject: string, counts: WordCounts): string | null {
  const words = contentWords(subject);
  const rarest = [...words].sort(
    (a, b) => counts.count(a) - counts.count(b) || words.indexOf(a) - words.indexOf(b),
  );
  for (let n = 2; n < words.length; n++) {
    const chosen = rarest.slice(0, n);
    if (counts.holding(chosen) === 1) return words.filter((w) => chosen.includes(w)).join(' ');
  }
  return null;
}

/** The dollar amount and the date an email's body states, where it states exactly one of each. */
function bodyFacts(email: InboxEmail): { amount?: string; statedDate?: string } {
  const amounts = distinct(email.body.match(AMOUNT) ?? []);
  const dates = distinct(email.body.match(STATED_DATE) ?? []);
  return {
    amount: amounts.length === 1 ? amounts[0] : undefined,
    statedDate: dates.length === 1 ? dates[0] : undefined,
  };
}

/** In how many emails of the mailbox (copies counted once) each amount or stated date appears. */
function countMentions(emails: InboxEmail[]): Map<string, number> {
  const copies = groupBy(
    emails,
    (e) => `${normalise(e.subject).toLowerCase()}\u0000${e.fromAddress}\u0000${minute(e)}`,
  );
  const counts = new Map<string, number>();
  for (const [first] of copies.values()) {
    const found = distinct([...(first.body.match(AMOUNT) ?? []), ...(first.body.match(STATED_DATE) ?? [])]);
    for (const value of found) counts.set(value, (counts.get(value) ?? 0) + 1);
  }
  return counts;
}

const minute = (e: InboxEmail) => Math.floor(e.date.getTime() / 60_000);

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    groups.set(k, [...(groups.get(k) ?? []), item]);
  }
  return groups;
}

const distinct = (values: string[]) => [...new Set(values.map((v) => normalise(v)))];
