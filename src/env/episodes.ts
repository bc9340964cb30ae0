/**
 * What the environments share: their dependencies, the per-sample seed, and the "once" helpers that make every
 * sample idempotent — an episode, a judgement or a label is produced at most once under its key, and a
 * retried attempt gets the stored one.
 */
import { createHash } from 'node:crypto';
import type OpenAI from 'openai';
import type { SampleHooks } from '../grpo/env';
import type { ModelServerClient } from '../modelServer/client';
import { deterministicReward, type RewardWeights } from '../reward/deterministic';
import { judge, type JudgeSettings } from '../reward/judge';
import type { Skill } from '../reward/skills';
import { teacherLabel, type Label } from '../reward/teacher';
import type { TeacherEndpoint } from '../reward/teacherClient';
import type { EpisodeKey, StoredEpisode } from '../store/episodes';
import type { StoredJudgement } from '../store/judgements';
import type { QuestionContext } from '../store/questions';
import type { Store } from '../store';
import { runEpisode, type AgentSettings } from './emailAgent';

export interface EnvDeps {
  store: Store;
  llm: OpenAI;
  modelServer: ModelServerClient;
  skills: Map<string, Skill>;
  teacher?: TeacherEndpoint;
}

/** Bad data or configuration: retrying cannot help, the run must stop and say why. */
export class DataError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DataError';
  }
}

/**
 * The seed of one sample, from the run's seed and the sample's place (not the run id): a replayed rollout
 * asks the sampler for the same tokens, and two runs with the same seed sample alike.
 */
export function sampleSeed(seed: number, ...place: (string | number)[]): number {
  return createHash('sha256')
    .update([seed, ...place].join(':'))
    .digest()
    .readUInt32LE(0);
}

export async function questionOf(deps: EnvDeps, id: string): Promise<QuestionContext> {
  const q = await deps.store.questions.questionContext(id);
  if (!q) throw new DataError(`question ${id} not found`);
  return q;
}

/** One episode under its key: the stored one when an attempt already finished it, else run and stored. */
export async function episodeOnce(
  deps: EnvDeps,
  key: EpisodeKey,
  q: QuestionContext,
  agent: AgentSettings,
  weights: RewardWeights,
  hooks: SampleHooks = {},
): Promise<StoredEpisode> {
  const stored = await deps.store.episodes.findEpisode(key);
  if (stored) return stored;
  const trajectory = await runEpisode(deps.llm, deps.store.mailbox, q, agent, hooks);
  const reward = deterministicReward(trajectory.facts, q.gold, agent.maxTurns, weights);
  return deps.store.episodes.storeEpisode(key, q.id, trajectory, reward);
}

/** A stored episode with its question, for judging or labelling it. */
export async function episodeWithQuestion(deps: EnvDeps, trajectoryId: number) {
  const episode = await deps.store.episodes.loadEpisode(trajectoryId);
  if (!episode?.questionId) throw new DataError(`trajectory ${trajectoryId} not found or has no question`);
  return { ...episode, question: await questionOf(deps, episode.questionId) };
}
export type EpisodeWithQuestion = Awaited<ReturnType<typeof episodeWithQuestion>>;

/** One judgement under its key: the stored one when an attempt already finished it, else judged and stored. */
export async function judgementOnce(
  deps: EnvDeps,
  episode: EpisodeWithQuestion,
  judgeKey: string,
  settings: JudgeSettings,
  hooks: SampleHooks = {},
): Promise<StoredJudgement> {
  const stored = await deps.store.judgements.findJudgement(episode.id, judgeKey);
  if (stored) return stored;
  const { question } = episode;
  const j = await judge(
    deps.llm,
    deps.store.mailbox,
    deps.skills,
    {
      question: question.question,
      reference: question.gold.answer,
      scope: question.scope,
      trajectory: episode.trajectory,
    },
    settings,
    hooks,
  );
  return deps.store.judgements.storeJudgement(episode.id, judgeKey, settings.model, j);
}

/** The teacher's label of a stored episode, asked once per trajectory. */
export async function labelOnce(
  deps: EnvDeps,
  episode: EpisodeWithQuestion,
  weights: RewardWeights,
  maxTurns: number,
): Promise<Label> {
  const stored = await deps.store.judgements.findLabel(episode.id);
  if (stored) return stored;
  const { question, trajectory } = episode;
  const label = await teacherLabel(
    question.question,
    question.gold,
    trajectory,
    weights,
    maxTurns,
    deps.teacher,
  );
  return deps.store.judgements.storeLabel(episode.id, label);
}
