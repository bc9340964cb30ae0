import type pg from 'pg';

/** What every store function takes: the process's pool (one per process; activities share it). */
export type Db = pg.Pool;

/**
 * Text as PostgreSQL can store it: NUL and unpaired surrogates (which a model can produce and text and jsonb
 * columns refuse) become U+FFFD. Applied to everything a model or a mail file wrote before it is stored.
 */
export function storable(text: string): string {
  return text.replace(/\u0000/g, '\uFFFD').toWellFormed();
}

/** A value as jsonb text, every string in it storable. */
export function storableJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === 'string' ? storable(v) : v));
}
