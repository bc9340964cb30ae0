/**
 * The reward model's data: labelled candidate episodes of a split, from the base and the warm-started
 * policies, plus corrupted copies of correct episodes (a plausible wrong answer, still citing the right
 * email) as hard negatives; chosen balanced between correct and incorrect, so that agreement cannot be won
 * by always giving one verdict.
 */
import pLimit from 'p-limit';
import type { SampleHooks, Split } from '../grpo/env';
import { sampleTasks } from '../grpo/sampleTasks';
import type { Mailbox } from '../mail/search';
import { addressesIn, datesIn, normalise, shiftDay } from '../reward/answerMatch';
import { deterministicReward, type RewardWeights } from '../reward/deterministic';
import { candidateStage, type EpisodeKey, type StoredEpisode } from '../store/episodes';
import type { QuestionContext } from '../store/questions';
import type { AgentTemplate } from './emailAgent';
import { policyDemonstration } from './demonstrations';
import {
  DataError,
  episodeOnce,
  episodeWithQuestion,
  labelOnce,
  questionOf,
  sampleSeed,
  type EnvDeps,
} from './episodes';
import type { Trajectory } from './trajectory';

export interface CandidatesInput {
  runId: string;
  seed: number;
  split: Split;
  questions: number;
  episodesPerQuestion: number;
  /** The policies whose episodes become candidates, e.g. ["base", "policy-warm@step-8"]. */
  models: string[];
  /** Add each question's scripted episode (search, read the gold email, answer): correct by construction. */
  scripted: boolean;
  corrupt: boolean;
  balance: boolean;
  agent: AgentTemplate;
  weights: RewardWeights;
}

/** Scripted episodes are stored at this sample; corrupted copies beside their originals, at sample + 1000. */
const SCRIPTED = 500;
const CORRUPTED = 1000;
const CONCURRENCY = 16;

/** Makes (or finds) a split's candidates and their labels; returns how many of each label there are. */
export async function prepareCandidates(deps: EnvDeps, input: CandidatesInput, hooks: SampleHooks = {}) {
  const stage = candidateStage(input.split);
  const questions = sampleTasks(
    await deps.store.questions.questionIds(input.split),
    input.seed,
    stage,
    0,
    input.questions,
  );
  const limit = pLimit(CONCURRENCY);
  /** Labels a stored candidate and, when it is correct, adds its corrupted copy. */
  const labelAndCorrupt = async (q: QuestionContext, key: EpisodeKey, episode: StoredEpisode) => {
    const label = await labelOnce(
      deps,
      await episodeWithQuestion(deps, episode.id),
      input.weights,
      input.agent.maxTurns,
    );
    if (!input.corrupt || !label.correct) return;
    const wrong = await corrupted(deps.store.mailbox, q, episode.trajectory);
    if (!wrong) return;
    const reward = deterministicReward(wrong.facts, q.gold, input.agent.maxTurns, input.weights);
    const copy = await deps.store.episodes.storeEpisode(
      { ...key, sample: CORRUPTED + key.sample },
      q.id,
      wrong,
      reward,
    );
    await labelOnce(deps, await episodeWithQuestion(deps, copy.id), input.weights, input.agent.maxTurns);
  };
  const sampled = questions.flatMap((taskId) =>
    input.models.flatMap((model, m) =>
      Array.from({ length: input.episodesPerQuestion }, (_, e) =>
        limit(async () => {
          const sample = m * input.episodesPerQuestion + e;
          const q = await questionOf(deps, taskId);
          const key = { runId: input.runId, stage, step: 0, taskId, sample };
          const agent = { ...input.agent, model, seed: sampleSeed(input.seed, stage, taskId, sample) };
          await labelAndCorrupt(q, key, await episodeOnce(deps, key, q, agent, input.weights, hooks));
        }),
      ),
    ),
  );
  const scripted = (input.scripted ? questions : []).map((taskId) =>
    limit(async () => {
      const q = await questionOf(deps, taskId);
      const key = { runId: input.runId, stage, step: 0, taskId, sample: SCRIPTED };
      const demo = await policyDemonstration(deps.store.mailbox, q, { ...input.agent, model: 'script' });
      if (!demo) return;
      const reward = deterministicReward(demo.trajectory.facts, q.gold, input.agent.maxTurns, input.weights);
      await labelAndCorrupt(
        q,
        key,
        await deps.store.episodes.storeEpisode(key, q.id, demo.trajectory, reward),
      );
    }),
  );
  await Promise.all([...sampled, ...scripted]);
  const all = await deps.store.episodes.candidates(input.runId, input.split);
  const counts = {
    correct: all.filter((c) => c.correct).length,
    incorrect: all.filter((c) => !c.correct).length,
  };
  if (input.balance && (counts.correct === 0 || counts.incorrect === 0))
    throw new DataError(
      `rewardModelData: the ${input.split} episodes are all ${counts.correct ? 'correct' : 'incorrect'} (${all.length}): nothing to balance; ` +
        'add scripted or corrupted episodes, a policy warm start, or more questions',
    );
  return counts;
}

/** An equal number of correct and incorrect candidates, in a seeded order (all of them when not balancing). */
export function balancedTasks(
  candidates: { task: string; correct: boolean }[],
  seed: number,
  balance: boolean,
): string[] {
  if (!balance) return candidates.map((c) => c.task);
  const pick = (correct: boolean) =>
    sampleTasks(
      candidates.filter((c) => c.correct === correct).map((c) => c.task),
      seed,
      'balance',
      0,
      Infinity,
    );
  const [yes, no] = [pick(true), pick(false)];
  const n = Math.min(yes.length, no.length);
  return [...yes.slice(0, n), ...no.slice(0, n)].sort();
}

/**
 * A correct episode with its answer replaced by a plausible wrong one of the same kind, taken from the same
 * email where possible (a recipient for the sender, a nearby date, another amount, another subject): the
 * citations stay right, so only checking what the answer is can tell.
 */
export async function corrupted(
  mailbox: Mailbox,
  q: QuestionContext,
  t: Trajectory,
): Promise<Trajectory | null> {
  const answer = t.facts.answer ?? '';
  const gold = await mailbox.read(q.scope, q.gold.messageIds[0]);
  const wrong = wrongAnswer(
    answer,
    gold ? [...gold.to, ...gold.cc, gold.from] : [],
    t.messages.map((m) => m.content ?? ''),
  );
  if (!wrong) return null;
  const messages = t.messages.map((m) => ({
    ...m,
    tool_calls: m.tool_calls?.map((c) =>
      c.function.name === 'return_final_answer'
        ? {
            ...c,
            function: {
              ...c.function,
              arguments: JSON.stringify({ ...safeParse(c.function.arguments), answer: wrong }),
            },
          }
        : c,
    ),
  }));
  return { ...t, messages, turns: [], facts: { ...t.facts, answer: wrong } };
}

/** A wrong answer of the same kind as `answer`, or null when none can be made. */
export function wrongAnswer(answer: string, addresses: string[], texts: string[]): string | null {
  const own = addressesIn(answer);
  if (own.length > 0) {
    const other = addresses.map((a) => a.toLowerCase()).find((a) => !own.includes(a));
    return other ? answer.replace(new RegExp(escape(own[0]), 'i'), other) : null;
  }
  const [date] = datesIn(answer);
  if (date) return shiftDay(date, 3);
  const money = /\$\s?([\d,]+(?:\.\d+)?)/.exec(answer);
  if (money) {
    const value = Number(money[1].replace(/,/g, '')) * 10;
    return answer.replace(money[0], `$${value.toLocaleString('en-US')}`);
  }
  // Other emails' subjects the agent saw: search hits (`id | date | from | subject | snippet`), read emails.
  const subjects = texts.flatMap((text) => [
    ...[...text.matchAll(/^m\d+ \| [^|\n]* \| [^|\n]* \| ([^|\n]{6,120}) \|/gm)].map((m) => m[1].trim()),
    ...[...text.matchAll(/^subject: (.{6,120})$/gm)].map((m) => m[1].trim()),
  ]);
  return subjects.find((s) => normalise(s) !== normalise(answer)) ?? null;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function safeParse(text: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text);
    JSON.stringify(value); // model JSON nested too deep to write back (RangeError) is no arguments
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : {};
  } catch {
    return {};
  }
}
