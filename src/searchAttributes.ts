/** The search attributes runs are listed and filtered by (registered by `evalrl up`). */
export const SEARCH_ATTRIBUTES = {
  EvalrlRunId: 'Keyword',
  EvalrlStage: 'Keyword',
  EvalrlStep: 'Int',
  EvalrlStatus: 'Keyword',
} as const;
