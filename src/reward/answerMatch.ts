/**
 * Answer vs reference: normalised exact match, token F1, and the dates and numbers both mention. Pure
 * functions, shared by the deterministic reward layer and the Skill-RM verifiers.
 */

const ARTICLES = new Set(['a', 'an', 'the']);
const MONTHS = [
  'january',
  'february',
  'march',
  'april',
  'may',
  'june',
  'july',
  'august',
  'september',
  'october',
  'november',
  'december',
];

/** Lower case, punctuation to spaces (but keep the inside of numbers, addresses and dates), no articles. */
export function normalise(text: string): string {
  return text
    .toLowerCase()
    .replace(/(\d),(\d{3})/g, '$1$2')
    .replace(/[^a-z0-9@.\-$/ ]+/g, ' ')
    .replace(/(^|\s)[.\-/]+|[.\-/]+(\s|$)/g, ' ')
    .split(/\s+/)
    .filter((w) => w && !ARTICLES.has(w))
    .join(' ');
}

export function exactMatch(answer: string, reference: string): boolean {
  return normalise(answer) === normalise(reference) && normalise(reference) !== '';
}

/** SQuAD-style token F1 over normalised tokens. */
export function tokenF1(answer: string, reference: string): number {
  const a = normalise(answer).split(' ').filter(Boolean);
  const r = normalise(reference).split(' ').filter(Boolean);
  if (a.length === 0 || r.length === 0) return 0;
  const counts = new Map<string, number>();
  for (const t of r) counts.set(t, (counts.get(t) ?? 0) + 1);
  let common = 0;
  for (const t of a) {
    const n = counts.get(t) ?? 0;
    if (n > 0) {
      common++;
      counts.set(t, n - 1);
    }
  }
  if (common === 0) return 0;
  const precision = common / a.length;
  const recall = common / r.length;
  return (2 * precision * recall) / (precision + recall);
}

/** Calendar dates mentioned in a text, as YYYY-MM-DD (ISO dates, "March 5, 2001", "3/5/2001"). */
export function datesIn(text: string): string[] {
  const found = new Set<string>();
  const pad = (n: number) => String(n).padStart(2, '0');
  for (const m of text.matchAll(/\b(\d{4})-(\d{2})-(\d{2})\b/g)) found.add(`${m[1]}-${m[2]}-${m[3]}`);
  const named = new RegExp(
    `\\b(${MONTHS.join('|')})\\.?\\s+(\\d{1,2})(?:st|nd|rd|th)?,?\\s+(\\d{4})\\b`,
    'gi',
  );
  for (const m of text.matchAll(named))
    found.add(`${m[3]}-${pad(MONTHS.indexOf(m[1].toLowerCase()) + 1)}-${pad(Number(m[2]))}`);
  for (const m of text.matchAll(/\b(\d{1,2})\/(\d{1,2})\/(\d{4})\b/g))
    found.add(`${m[3]}-${pad(Number(m[1]))}-${pad(Number(m[2]))}`);
  return [...found];
}

/** Numbers mentioned in a text, thousands separators and currency signs removed ("$1,500.00" → 1500). */
export function numbersIn(text: string): number[] {
  return [...text.replace(/(\d),(\d{3})/g, '$1$2').matchAll(/-?\d+(?:\.\d+)?/g)].map((m) => Number(m[0]));
}

/** The reference's dates (or, without dates, its numbers) all appear in the answer. Null when it has neither. */
export function datesAndNumbersMatch(answer: string, reference: string): boolean | null {
  const refDates = datesIn(reference);
  if (refDates.length > 0) {
    const got = new Set(datesIn(answer));
    return refDates.every((d) => got.has(d));
  }
  const refNumbers = numbersIn(reference);
  if (refNumbers.length === 0) return null;
  const got = numbersIn(answer);
  return refNumbers.every((n) => got.some((g) => Math.abs(g - n) < 1e-9));
}

const IDK =
  /\b(i (do not|don't|dont) know|not sure|cannot find|can't find|couldn't find|could not find|no (relevant )?(emails?|information) (found|available)|unable to (find|determine))\b/i;

export function isIdk(answer: string): boolean {
  return answer.trim() === '' || IDK.test(answer);
}

export interface AnswerCheck {
  exactMatch: boolean;
  tokenF1: number;
  /** The whole normalised reference appears in the answer (a verbose but right answer). */
  containsReference: boolean;
  datesNumbersMatch: boolean | null;
  correct: boolean;
}

/**
 * Correct = exact match; or the reference contained in the answer; or token F1 ≥ threshold — in the last two
 * cases only if no date or number of the reference is contradicted. "I don't know" is never correct.
 */
export function checkAnswer(answer: string, reference: string, f1Threshold = 0.6): AnswerCheck {
  const em = exactMatch(answer, reference);
  const f1 = tokenF1(answer, reference);
  const ref = normalise(reference);
  const containsReference = ref !== '' && ` ${normalise(answer)} `.includes(` ${ref} `);
  const dn = datesAndNumbersMatch(answer, reference);
  const correct =
    !isIdk(answer) && (em || ((containsReference || f1 >= f1Threshold || dn === true) && dn !== false));
  return { exactMatch: em, tokenF1: f1, containsReference, datesNumbersMatch: dn, correct };
}
