import { initialFacts, type EpisodeFacts } from '../src/env/trajectory';

/** An episode's facts for tests: a clean answered one-turn episode unless told otherwise. */
export const episodeFacts = (over: Partial<EpisodeFacts> = {}): EpisodeFacts => ({
  ...initialFacts(),
  turns: 1,
  ending: 'answered',
  ...over,
});
