import type pg from 'pg';
import type { EpisodeFacts } from '../env/trajectory';
import { readEmail, type MailboxScope } from '../mail/search';
import { checkAnswer, isIdk, normalise } from './answerMatch';

/** What a verifier sees: the question's gold data and the episode's facts. */
export interface VerifierContext {
  pool: pg.Pool;
  scope: MailboxScope;
  reference: string;
  facts: EpisodeFacts;
}

export interface VerifierResult {
  verifier: string;
  passed: boolean;
  /** A critical failure caps the score, whatever the judge's opinion. */
  critical: boolean;
  detail: string;
}

type Verifier = (ctx: VerifierContext) => Promise<Omit<VerifierResult, 'verifier'>>;

const STOP = new Set(
  'a an the of to in on at for by with from and or is was were be it this that i me my you your'.split(' '),
);

/** Verifiers are TypeScript, registered here by the name SKILL.md files use. */
export const VERIFIERS: Record<string, Verifier> = {
  async answer_matches_reference({ reference, facts }) {
    const answer = facts.answer ?? '';
    if (facts.answer === null || isIdk(answer))
      return { passed: false, critical: false, detail: 'no answer given' };
    const c = checkAnswer(answer, reference);
    const detail = `exact=${c.exactMatch} contains=${c.containsReference} f1=${c.tokenF1.toFixed(2)} dates/numbers=${c.datesNumbersMatch}`;
    return { passed: c.correct, critical: c.datesNumbersMatch === false, detail };
  },

  async sources_are_real({ pool, scope, facts }) {
    const seen = new Set([...facts.searchedIds, ...facts.readIds]);
    const bad: string[] = [];
    for (const id of facts.sources) {
      if (!seen.has(id) || (await readEmail(pool, scope, id)) === null) bad.push(id);
    }
    if (facts.sources.length === 0) return { passed: false, critical: false, detail: 'no sources cited' };
    return {
      passed: bad.length === 0,
      critical: bad.length > 0,
      detail: bad.length ? `invented or unseen: ${bad.join(', ')}` : `${facts.sources.length} real`,
    };
  },

  async answer_supported_by_read_emails({ pool, scope, facts }) {
    const words = normalise(facts.answer ?? '')
      .split(' ')
      .filter((w) => w && !STOP.has(w));
    if (words.length === 0) return { passed: false, critical: false, detail: 'nothing to support' };
    const bodies: string[] = [];
    for (const id of facts.readIds) {
      const email = await readEmail(pool, scope, id);
      if (email)
        bodies.push(
          normalise(
            `${email.subject} ${email.from} ${email.to.join(' ')} ${email.date.slice(0, 10)} ${email.body}`,
          ),
        );
    }
    const text = ` ${bodies.join(' ')} `;
    const found = words.filter((w) => text.includes(` ${w} `) || text.includes(w)).length;
    const share = found / words.length;
    return {
      passed: share >= 0.5,
      critical: false,
      detail: `${found}/${words.length} answer words in ${bodies.length} read email(s)`,
    };
  },

  async format_valid({ facts }) {
    const bad = facts.malformedCalls + facts.unknownTools + facts.badArguments;
    const ended = facts.ending === 'answered';
    return {
      passed: bad === 0 && ended,
      critical: bad > 0,
      detail: `${bad} bad call(s), ending ${facts.ending}`,
    };
  },
};

export async function runVerifier(name: string, ctx: VerifierContext): Promise<VerifierResult> {
  const verifier = VERIFIERS[name];
  if (!verifier) throw new Error(`unknown verifier "${name}"`);
  return { verifier: name, ...(await verifier(ctx)) };
}
