import { stackChecks } from './001_stack_checks';
import { mailbox } from './002_mailbox';
import { questions } from './003_questions';
import { trajectories } from './004_trajectories';
import { judgements } from './005_judgements';
import { stepMetrics } from './006_step_metrics';
import { runs } from './007_runs';
import { searchParts } from './008_search_parts';
import { searchTags } from './009_search_tags';
import { emailIdentity } from './010_email_identity';
import { searchExactForms } from './011_search_exact_forms';
import { searchVectorOnce } from './012_search_vector_once';
import { searchAsWritten } from './013_search_as_written';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Applied in order; a migration is never edited once it has landed — add a new one. */
export const MIGRATIONS: Migration[] = [
  stackChecks,
  mailbox,
  questions,
  trajectories,
  judgements,
  stepMetrics,
  runs,
  searchParts,
  searchTags,
  emailIdentity,
  searchExactForms,
  searchVectorOnce,
  searchAsWritten,
];
