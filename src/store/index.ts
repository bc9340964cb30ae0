/**
 * Every SQL statement of evalrl lives under src/store/, one file per kind of record. `createStore` binds
 * them to a pool, so environments and activities call `store.episodes.findEpisode(key)` and never hold SQL.
 */
import type { Db } from './db';
import * as episodes from './episodes';
import * as ingest from './ingest';
import * as judgements from './judgements';
import * as mailbox from './mailbox';
import * as questions from './questions';
import * as runs from './runs';

type Bound<M> = {
  [K in keyof M as M[K] extends (db: Db, ...args: never[]) => unknown ? K : never]: M[K] extends (
    db: Db,
    ...args: infer A
  ) => infer R
    ? (...args: A) => R
    : never;
};

function bind<M extends object>(db: Db, module: M): Bound<M> {
  const bound: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(module))
    if (typeof value === 'function' && value.length >= 1) bound[name] = value.bind(null, db);
  return bound as Bound<M>;
}

export function createStore(db: Db) {
  return {
    db,
    episodes: bind(db, episodes),
    ingest: bind(db, ingest),
    judgements: bind(db, judgements),
    mailbox: mailbox.mailboxOf(db),
    questions: bind(db, questions),
    runs: bind(db, runs),
  };
}

export type Store = ReturnType<typeof createStore>;
