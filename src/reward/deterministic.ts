import { z } from 'zod';
import type { EpisodeFacts } from '../env/trajectory';
import { checkAnswer, isIdk } from './answerMatch';

/** Weights of the ART·E-style shaped reward; part of the run spec. */
export const rewardWeightsSchema = z.strictObject({
  correct: z.number().default(1),
  wrong: z.number().default(-1),
  idk: z.number().default(0),
  malformed: z.number().default(-2),
  sourcesBonus: z.number().default(0.1), // × share of gold ids cited
  turnsBonus: z.number().default(0.1), // × share of the turn budget left, on correct answers only
  foundGold: z.number().default(0.1), // partial credit: a search returned a gold email
  readGold: z.number().default(0.1), // partial credit: the agent read a gold email
  hallucinatedSource: z.number().default(-0.1), // × cited ids the agent never saw
  citedRead: z.number().default(0.1), // reference-free: the answer cites an email the agent read
  badCall: z.number().default(-0.1), // reference-free: × malformed replies, unknown tools and bad arguments
  correctF1: z.number().min(0).max(1).default(0.6), // token F1 at or above this counts as correct
});
export type RewardWeights = z.infer<typeof rewardWeightsSchema>;

export interface Gold {
  answer: string;
  messageIds: string[];
}

export interface RewardComponents {
  formatValid: boolean;
  answered: boolean;
  idk: boolean;
  exactMatch: boolean;
  tokenF1: number;
  datesNumbersMatch: boolean | null;
  correct: boolean;
  sourcesPrecision: number;
  sourcesRecall: number;
  foundGold: boolean;
  readGold: boolean;
  hallucinatedIds: number;
  turns: number;
  total: number;
}

/**
 * The deterministic layer: every component from the trajectory's facts and the gold question, and the
 * shaped total. Correctness is checkAnswer's (answerMatch.ts), shared with the Skill-RM verifier.
 */
export function deterministicReward(
  facts: EpisodeFacts,
  gold: Gold,
  maxTurns: number,
  w: RewardWeights,
): RewardComponents {
  const answer = facts.answer ?? '';
  const answered = facts.answer !== null;
  const formatValid =
    facts.malformedCalls + facts.unknownTools + facts.badArguments === 0 && facts.ending !== 'malformed';
  const idk = answered && isIdk(answer);
  const check = checkAnswer(answer, gold.answer, w.correctF1);
  const correct = answered && check.correct;
  const goldIds = new Set(gold.messageIds);
  const cited = [...new Set(facts.sources)];
  const citedGold = cited.filter((id) => goldIds.has(id)).length;
  const seen = new Set([...facts.searchedIds, ...facts.readIds]);
  const hallucinatedIds = cited.filter((id) => !seen.has(id)).length;
  const foundGold = facts.searchedIds.some((id) => goldIds.has(id));
  const readGold = facts.readIds.some((id) => goldIds.has(id));

  let total: number;
  if (facts.ending === 'malformed' || (!answered && facts.malformedCalls > 0)) total = w.malformed;
  else if (correct) {
    total =
      w.correct +
      w.sourcesBonus * (citedGold / goldIds.size) +
      w.turnsBonus * Math.max(0, 1 - facts.turns / maxTurns);
  } else if (!answered || idk) total = w.idk;
  else total = w.wrong;
  total +=
    (foundGold ? w.foundGold : 0) + (readGold ? w.readGold : 0) + w.hallucinatedSource * hallucinatedIds;

  return {
    formatValid,
    answered,
    idk,
    exactMatch: answered && check.exactMatch,
    tokenF1: answered ? check.tokenF1 : 0,
    datesNumbersMatch: answered ? check.datesNumbersMatch : null,
    correct,
    sourcesPrecision: cited.length ? citedGold / cited.length : 0,
    sourcesRecall: citedGold / goldIds.size,
    foundGold,
    readGold,
    hallucinatedIds,
    turns: facts.turns,
    total,
  };
}

/**
 * The reference-free part of the layer: what can be checked without the gold answer — format, valid tool
 * use, citing an email the agent actually read, no invented sources. With a reward model's score added, it is
 * the policy's reward when correctness must come from the judge alone (the seed's setting).
 */
export function referenceFreeReward(facts: EpisodeFacts, w: RewardWeights): number {
  const answered = facts.answer !== null;
  if (facts.ending === 'malformed' || (!answered && facts.malformedCalls > 0)) return w.malformed;
  const read = new Set(facts.readIds);
  const seen = new Set([...facts.searchedIds, ...facts.readIds]);
  const cited = [...new Set(facts.sources)];
  const badCalls = facts.malformedCalls + facts.unknownTools + facts.badArguments;
  return (
    (answered && !isIdk(facts.answer ?? '') ? 0 : w.idk) +
    (cited.some((id) => read.has(id)) ? w.citedRead : 0) +
    w.hallucinatedSource * cited.filter((id) => !seen.has(id)).length +
    w.badCall * badCalls
  );
}
