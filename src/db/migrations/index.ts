import { stackChecks } from './001_stack_checks';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Applied in order; a migration is never edited once it has landed — add a new one. */
export const MIGRATIONS: Migration[] = [stackChecks];
