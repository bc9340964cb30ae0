import type { EpisodeFacts } from '../env/trajectory';
import type { FullEmail, Mailbox, MailboxScope } from '../mail/search';
import { subjectWords } from '../mail/templateQuestions';
import { addressesIn, checkAnswer, datesIn, isIdk, normalise, numbersIn } from './answerMatch';

/** What a verifier sees: the question, the episode's facts, the mailbox — and the reference, when judging may. */
export interface VerifierContext {
  mailbox: Mailbox;
  scope: MailboxScope;
  question: string;
  /** The gold answer; null in reference-free judging. */
  reference: string | null;
  facts: EpisodeFacts;
}

export interface VerifierResult {
  verifier: string;
  passed: boolean;
  /** A critical failure caps the score, whatever the judge's opinion. */
  critical: boolean;
  detail: string;
}

interface Verifier {
  /** Needs the gold answer: unavailable to a reference-free judge. */
  needsReference: boolean;
  run(ctx: VerifierContext): Promise<Omit<VerifierResult, 'verifier'>>;
}

const QUOTED = /"([^"]{3,200})"/g;
const STOP = new Set(
  'a an the of to in on at for by with from and or is was were be it this that i me my you your re fw fwd'.split(
    ' ',
  ),
);

/** The cited emails that exist in the inbox (and, with `readOnly`, that the agent also read). */
async function citedEmails(ctx: VerifierContext, readOnly: boolean): Promise<FullEmail[]> {
  const read = new Set(ctx.facts.readIds);
  const emails: FullEmail[] = [];
  for (const id of new Set(ctx.facts.sources)) {
    if (readOnly && !read.has(id)) continue;
    const email = await ctx.mailbox.read(ctx.scope, id);
    if (email) emails.push(email);
  }
  return emails;
}

const ANY_FIELD = ['from', 'to', 'date', 'subject', 'body'] as const;
type Field = (typeof ANY_FIELD)[number];

/**
 * Verifiers look at this much of a body (and of a header field): an answer's facts are near the top of a real
 * email, and a body can be 25 MiB — matching all of it would stall a judge worker past its heartbeat.
 */
export const VERIFIED_CHARS = 100_000;
const bounded = (text: string) => text.slice(0, VERIFIED_CHARS);
/** An answer is at most 2,000 characters (finalAnswerSchema); a longer one is checked by its start. */
const ANSWER_CHARS = 2000;

/** The fields of an email an answer can come from, normalised for matching. */
function fields(e: FullEmail): Record<Field, string> {
  return {
    from: normalise(bounded(e.from)),
    to: normalise(bounded([...e.to, ...e.cc].join(' '))),
    date: e.date.slice(0, 10),
    subject: normalise(bounded(e.subject)),
    body: normalise(bounded(e.body)),
  };
}

/** What a question asks for, by the phrasings of src/mail/templateQuestions.ts; any field for other questions. */
const ASKED: [RegExp, readonly Field[]][] = [
  [/^who (?:sent|wrote)\b/i, ['from']],
  [/^(?:on what date|when) was\b.*\bsent\W*$/i, ['date']],
  [/^what was the subject of\b/i, ['subject']],
  [/^what (?:dollar amount|date) is (?:mentioned|given) in\b/i, ['subject', 'body']],
];

/** The fields of an email that can hold the answer to `question`: a recipient does not answer "who sent". */
export function askedFields(question: string): readonly Field[] {
  return ASKED.find(([pattern]) => pattern.test(question.trim()))?.[1] ?? ANY_FIELD;
}

/** Where an answer's facts appear: its dates, else its numbers, else its addresses, else most content words. */
function fieldsHolding(fullAnswer: string, e: FullEmail): Field[] {
  const answer = fullAnswer.slice(0, ANSWER_CHARS); // each of its facts is looked up in a field: bounded
  const f = fields(e);
  // Each field's facts are collected once, into sets: a lookup per fact would be quadratic.
  const dates = datesIn(answer);
  if (dates.length > 0)
    return ANY_FIELD.filter((k) => {
      const inField = new Set(k === 'date' ? [f.date] : datesIn(f[k]));
      return dates.every((d) => inField.has(d));
    });
  const addresses = addressesIn(answer);
  if (addresses.length > 0) return ANY_FIELD.filter((k) => addresses.every((a) => f[k].includes(a)));
  const numbers = numbersIn(answer);
  if (numbers.length > 0)
    return ANY_FIELD.filter((k) => {
      const inField = new Set(numbersIn(f[k]));
      return numbers.every((n) => inField.has(n));
    });
  const words = normalise(answer)
    .split(' ')
    .filter((w) => w && !STOP.has(w));
  if (words.length === 0) return [];
  return ANY_FIELD.filter((k) => {
    const inField = new Set(f[k].split(' '));
    return words.filter((w) => inField.has(w)).length / words.length >= 0.6;
  });
}

/** What a question says about the email it asks about (see src/mail/templateQuestions.ts for the phrasings). */
export interface NamedEmail {
  subject: string[]; // quoted: "the email with the subject "…""
  topic: string[]; // words of its subject: "the email about celebrity cruises"
  mentions: string[]; // a phrase of its body: "the email that mentions $1,250"
  addresses: string[]; // its sender or a recipient: "the email jane@enron.com sent me on …"
  dates: string[]; // the day it was sent
}
const NAMED_PARTS: Record<keyof NamedEmail, string> = {
  subject: 'quoted subject',
  topic: 'topic',
  mentions: 'mention',
  addresses: 'address',
  dates: 'date',
};
const TOPIC = /\bthe email about /gi;
const MENTIONS = /\bthe email that mentions /gi;
const isSpace = (c: string) => /\s/.test(c);

/**
 * What follows the first `phrase` to the end of the question, without a trailing `[ sent]` and `?`s, on the
 * phrase's line: `phrase(.+?)( sent)?\s*\?*\s*$` by plain scans (that regex backtracks cubically on spaces).
 */
function tailAfter(
  question: string,
  phrase: RegExp,
  sent: boolean,
): { index: number; text: string } | undefined {
  let end = question.length;
  while (end > 0 && isSpace(question[end - 1])) end--;
  while (end > 0 && question[end - 1] === '?') end--;
  while (end > 0 && isSpace(question[end - 1])) end--;
  const cut = sent && question.slice(Math.max(0, end - 5), end).toLowerCase() === ' sent' ? end - 5 : end;
  const lineStart = (stop: number) => question.lastIndexOf('\n', stop - 1);
  const lines = { [cut]: lineStart(cut), [end]: lineStart(end) }; // once: a search per match is quadratic
  for (const m of question.matchAll(phrase)) {
    const start = m.index + m[0].length;
    const stop = cut > start ? cut : end;
    if (stop <= start) continue;
    if (lines[stop] >= start) continue; // `.` stops at a line end
    return { index: m.index, text: question.slice(start, stop) };
  }
  return undefined;
}

export function namedEmail(fullQuestion: string): NamedEmail {
  const question = fullQuestion.slice(0, VERIFIED_CHARS); // each named part is looked up in an email: bounded
  const mentioned = tailAfter(question, MENTIONS, false);
  const mention = mentioned?.text;
  // A date or address the body mentions is not the email's day or sender.
  const rest = mentioned === undefined ? question : `${question.slice(0, mentioned.index)} `;
  const quoted = [...rest.matchAll(QUOTED)].map((m) => normalise(m[1])).filter(Boolean);
  const topic = quoted.length ? undefined : tailAfter(rest, TOPIC, true)?.text;
  return {
    subject: quoted,
    topic: topic ? subjectWords(topic) : [],
    mentions: mention && normalise(mention) ? [normalise(mention)] : [],
    addresses: addressesIn(rest),
    dates: datesIn(rest),
  };
}

export function isNamedEmail(named: NamedEmail, e: FullEmail): boolean {
  const f = fields(e);
  const subject = ` ${f.subject} `;
  const text = ` ${f.subject} ${f.body} `;
  const topicWords = new Set(subjectWords(e.subject));
  return (
    named.subject.every((p) => subject.includes(` ${p} `) || f.body.includes(p)) &&
    named.topic.every((w) => topicWords.has(w)) &&
    named.mentions.every((p) => text.includes(` ${p} `)) &&
    named.addresses.every((a) => f.from.includes(a) || f.to.includes(a)) &&
    named.dates.every((d) => f.date === d)
  );
}

/** Verifiers are TypeScript, registered here by the name SKILL.md files use. */
export const VERIFIERS: Record<string, Verifier> = {
  answer_matches_reference: {
    needsReference: true,
    async run({ reference, facts }) {
      const answer = facts.answer ?? '';
      if (facts.answer === null || isIdk(answer))
        return { passed: false, critical: false, detail: 'no answer given' };
      const c = checkAnswer(answer, reference ?? '');
      const detail = `exact=${c.exactMatch} contains=${c.containsReference} f1=${c.tokenF1.toFixed(2)} dates/numbers=${c.datesNumbersMatch}`;
      return { passed: c.correct, critical: c.datesNumbersMatch === false, detail };
    },
  },

  sources_are_real: {
    needsReference: false,
    async run(ctx) {
      const { facts } = ctx;
      if (facts.sources.length === 0) return { passed: false, critical: false, detail: 'no sources cited' };
      const seen = new Set([...facts.searchedIds, ...facts.readIds]);
      const bad: string[] = [];
      for (const id of facts.sources)
        if (!seen.has(id) || (await ctx.mailbox.read(ctx.scope, id)) === null) bad.push(id);
      return {
        passed: bad.length === 0,
        critical: bad.length > 0,
        detail: bad.length
          ? `invented or unseen: ${bad.join(', ').slice(0, 300)}`
          : `${facts.sources.length} real`,
      };
    },
  },

  answer_in_cited_email: {
    needsReference: false,
    async run(ctx) {
      // An episode that never answered has nothing to support (critical); an honest "I don't know" is left to
      // the judge, as the seed rewards it above a wrong answer.
      if (ctx.facts.answer === null) return { passed: false, critical: true, detail: 'no answer given' };
      if (isIdk(ctx.facts.answer))
        return { passed: false, critical: false, detail: 'the answer is "I don\'t know"' };
      const answer = ctx.facts.answer;
      // An answer that no email the agent read and cited holds is made up, as an invented source is: critical.
      const emails = await citedEmails(ctx, true);
      if (emails.length === 0) return { passed: false, critical: true, detail: 'no cited email was read' };
      // In a field the question does not ask for, it answers another question (a recipient for the sender).
      const asked = askedFields(ctx.question);
      const holding = [...new Set(emails.flatMap((e) => fieldsHolding(answer, e)))];
      const found = holding.filter((k) => asked.includes(k));
      const detail = found.length
        ? `the answer appears in the cited email's ${found.join(', ')}`
        : holding.length
          ? `the answer appears in the cited email's ${holding.join(', ')}, not in its ${asked.join(' or ')}, which the question asks for`
          : `the answer appears in none of the ${emails.length} cited email(s) read`;
      return { passed: found.length > 0, critical: found.length === 0, detail };
    },
  },

  cited_email_matches_question: {
    needsReference: false,
    async run(ctx) {
      const emails = await citedEmails(ctx, false);
      if (emails.length === 0) return { passed: false, critical: false, detail: 'no real email cited' };
      const named = namedEmail(ctx.question);
      const checked = (Object.keys(named) as (keyof NamedEmail)[]).filter((k) => named[k].length > 0);
      if (checked.length === 0)
        return {
          passed: true,
          critical: false,
          detail: 'the question states no subject, topic, mention, address or date to check',
        };
      // An answer read from another email than the one the question names is an answer to another question.
      const ok = emails.filter((e) => isNamedEmail(named, e)).length;
      return {
        passed: ok > 0,
        critical: ok === 0,
        detail: `${ok} of ${emails.length} cited email(s) match the question's ${checked.map((k) => NAMED_PARTS[k]).join(', ')}`,
      };
    },
  },

  format_valid: {
    needsReference: false,
    async run({ facts }) {
      const bad = facts.malformedCalls + facts.unknownTools + facts.badArguments;
      return {
        passed: bad === 0 && facts.ending === 'answered',
        critical: bad > 0,
        detail: `${bad} bad call(s), ending ${facts.ending}`,
      };
    },
  },
};

export const isVerifier = (name: string) => Object.hasOwn(VERIFIERS, name);

/** The verifiers a judge may run: all of them, or without a reference only those that need none. */
export function availableVerifiers(withReference: boolean): string[] {
  return Object.keys(VERIFIERS).filter((v) => withReference || !VERIFIERS[v].needsReference);
}

export async function runVerifier(name: string, ctx: VerifierContext): Promise<VerifierResult> {
  if (!isVerifier(name)) throw new Error(`unknown verifier "${name}"`);
  if (VERIFIERS[name].needsReference && ctx.reference === null)
    throw new Error(`verifier "${name}" needs the reference answer`);
  return { verifier: name, ...(await VERIFIERS[name].run(ctx)) };
}
