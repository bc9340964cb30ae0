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

const EDGE_PUNCT = '._-/';

/** A word without its leading and trailing `._-/` (a plain scan: a regex for this backtracks quadratically). */
function trimPunct(word: string): string {
  let start = 0;
  let end = word.length;
  while (start < end && EDGE_PUNCT.includes(word[start])) start++;
  while (end > start && EDGE_PUNCT.includes(word[end - 1])) end--;
  return word.slice(start, end);
}

/**
 * Lower case, punctuation to spaces (but keep the inside of numbers, addresses and dates), no articles. Linear
 * in the text: it runs on model answers and email bodies.
 */
export function normalise(text: string): string {
  return text
    .toLowerCase()
    .replace(/(\d),(\d{3})/g, '$1$2')
    .replace(/[^a-z0-9@._\-$/ ]+/g, ' ')
    .split(' ')
    .map(trimPunct)
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

const ISO_DATE = /(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)/g; // also inside a timestamp, 2001-05-05T14:32:00Z
const NAMED_DATE = new RegExp(
  `\\b(${MONTHS.join('|')})\\.?\\s+(\\d{1,2})(?:st|nd|rd|th)?,?\\s+(\\d{4})\\b`,
  'gi',
);
const SLASHED_DATE = /\b(\d{1,2})\/(\d{1,2})\/(\d{4})\b/g;

/** A day that exists in the calendar: 2001-02-30, 2001-13-01 and "Feb 31" do not. */
export function isCalendarDay(year: number, month: number, day: number): boolean {
  if (!Number.isInteger(year) || !Number.isInteger(month) || !Number.isInteger(day)) return false;
  if (month < 1 || month > 12 || day < 1) return false;
  return day <= new Date(Date.UTC(2000, month, 0)).getUTCDate() - (month === 2 && !isLeap(year) ? 1 : 0);
}
const isLeap = (y: number) => (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;

/**
 * Calendar dates mentioned in a text, as YYYY-MM-DD (ISO dates and timestamps, "March 5, 2001", "3/5/2001").
 * Impossible dates (2001-02-30, 2001-13-01, February 31) are no dates.
 */
export function datesIn(text: string): string[] {
  const found = new Set<string>();
  const pad = (n: number) => String(n).padStart(2, '0');
  const add = (y: string, m: number, d: number) => {
    if (isCalendarDay(Number(y), m, d)) found.add(`${y}-${pad(m)}-${pad(d)}`);
  };
  for (const m of text.matchAll(ISO_DATE)) add(m[1], Number(m[2]), Number(m[3]));
  for (const m of text.matchAll(NAMED_DATE)) add(m[3], MONTHS.indexOf(m[1].toLowerCase()) + 1, Number(m[2]));
  for (const m of text.matchAll(SLASHED_DATE)) add(m[3], Number(m[1]), Number(m[2]));
  return [...found];
}

/** `day` (YYYY-MM-DD) moved by `days`, or null when it is no day or the result is out of range. Never throws. */
export function shiftDay(day: string, days: number): string | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(day);
  if (!m || !isCalendarDay(Number(m[1]), Number(m[2]), Number(m[3]))) return null;
  return isoDay(Date.parse(`${day}T00:00:00Z`) + days * 86_400_000) || null;
}

/** The UTC day of a time as YYYY-MM-DD; '' for an invalid date or one outside years 0000–9999. Never throws. */
export function isoDay(time: Date | number): string {
  const d = new Date(typeof time === 'number' ? time : time.getTime());
  if (Number.isNaN(d.getTime())) return '';
  const year = d.getUTCFullYear();
  if (year < 0 || year > 9999) return '';
  return d.toISOString().slice(0, 10);
}

const withoutDates = (text: string) =>
  text.replace(ISO_DATE, ' ').replace(NAMED_DATE, ' ').replace(SLASHED_DATE, ' ');

const LOCAL = /[a-z0-9._%+'-]/i;
const DOMAIN = /[a-z0-9.-]/i;
const LETTER = /[a-z]/i;

/**
 * Email addresses in a text, lower-cased: what /[a-z0-9._%+'-]+@[a-z0-9.-]+\.[a-z]{2,}/gi matches, found by a
 * scan from each `@` (that regex backtracks quadratically on a long run of address characters).
 */
export function addressesIn(text: string): string[] {
  const found = new Set<string>();
  let from = 0; // a match starts at or after the end of the last one
  for (let at = text.indexOf('@'); at !== -1; at = text.indexOf('@', at + 1)) {
    let start = at;
    while (start > from && LOCAL.test(text[start - 1])) start--;
    if (start === at) continue;
    let end = at + 1;
    while (end < text.length && DOMAIN.test(text[end])) end++;
    // The last dot of the domain run (not its first character) followed by two letters ends the domain.
    let dot = -1;
    for (let i = end - 3; i > at + 1; i--)
      if (text[i] === '.' && LETTER.test(text[i + 1]) && LETTER.test(text[i + 2])) {
        dot = i;
        break;
      }
    if (dot === -1) continue;
    let stop = dot + 1;
    while (stop < end && LETTER.test(text[stop])) stop++;
    found.add(text.slice(start, stop).toLowerCase());
    from = stop;
  }
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
  const refNumbers = numbersIn(withoutDates(reference));
  if (refNumbers.length === 0) return null;
  const got = new Set(numbersIn(withoutDates(answer))); // a set: a scan per number is quadratic
  return refNumbers.every((n) => got.has(n));
}

/**
 * An answer that hedges across candidates of the reference's kind — more dates, addresses or numbers than the
 * reference states, beyond a little context — is not an answer: listing every sender must not score.
 */
export function hedges(answer: string, reference: string): boolean {
  const refDates = datesIn(reference).length;
  if (refDates > 0 && datesIn(answer).length > refDates + 1) return true;
  const refAddresses = addressesIn(reference).length;
  if (refAddresses > 0 && addressesIn(answer).length > refAddresses + 1) return true;
  const refNumbers = new Set(numbersIn(withoutDates(reference))).size;
  const numbers = new Set(numbersIn(withoutDates(answer))).size;
  return refDates === 0 && refNumbers > 0 && numbers > Math.max(refNumbers + 2, 2 * refNumbers);
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
 * Correct = exact match; or the reference contained in a short answer; or token F1 ≥ threshold — in the last
 * two cases only if no date or number of the reference is contradicted. An answer that hedges across
 * candidates (see `hedges`) or says "I don't know" is never correct.
 */
export function checkAnswer(answer: string, reference: string, f1Threshold = 0.6): AnswerCheck {
  const em = exactMatch(answer, reference);
  const f1 = tokenF1(answer, reference);
  const ref = normalise(reference);
  const said = normalise(answer);
  const short = said.split(' ').length <= 2 * ref.split(' ').length + 6;
  const containsReference = ref !== '' && short && ` ${said} `.includes(` ${ref} `);
  const dn = datesAndNumbersMatch(answer, reference);
  const correct =
    !isIdk(answer) &&
    (em ||
      (!hedges(answer, reference) &&
        (containsReference || f1 >= f1Threshold || dn === true) &&
        dn !== false));
  return { exactMatch: em, tokenF1: f1, containsReference, datesNumbersMatch: dn, correct };
}
