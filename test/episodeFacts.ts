import type { EpisodeFacts } from '../src/env/trajectory';

/** An episode's facts for tests: a clean answered episode unless told otherwise. */
export const episodeFacts = (over: Partial<EpisodeFacts> = {}): EpisodeFacts => ({
  answer: null,
  sources: [],
  searchedIds: [],
  readIds: [],
  malformedCalls: 0,
  unknownTools: 0,
  badArguments: 0,
  turns: 1,
  ending: 'answered',
  ...over,
});
