import { createHash } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/activity';
import type OpenAI from 'openai';
import type pg from 'pg';
import { runEpisode, type AgentSettings, type EpisodeQuestion } from '../env/emailAgent';
import type { Trajectory } from '../env/trajectory';
import {
  loadTrajectory,
  storeDeterministicReward,
  storeTrajectory,
  type TrajectoryKey,
} from '../env/trajectoryStore';
import type { MailboxScope } from '../mail/search';
import {
  deterministicReward,
  type Gold,
  type RewardComponents,
  type RewardWeights,
} from '../reward/deterministic';
import { judge, type Judgement, type JudgeSettings } from '../reward/judge';
import { storeJudgement } from '../reward/judgementStore';
import type { Skill } from '../reward/skills';
import { teacherLabel, type Label, type TeacherEndpoint } from '../reward/teacher';

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

export interface QuestionContext {
  id: string;
  question: string;
  gold: Gold;
  episode: EpisodeQuestion;
  scope: MailboxScope;
}

export async function loadQuestion(pool: pg.Pool, id: string): Promise<QuestionContext> {
  const { rows } = await pool.query(
    `SELECT q.question, q.answer, q.message_ids, q.inbox_id, q.query_date, i.address
     FROM questions q JOIN inboxes i ON i.id = q.inbox_id WHERE q.id = $1`,
    [id],
  );
  if (rows.length === 0) throw ApplicationFailure.nonRetryable(`question ${id} not found`);
  const q = rows[0];
  return {
    id,
    question: q.question,
    gold: { answer: q.answer, messageIds: q.message_ids },
    episode: { question: q.question, inbox: q.inbox_id, inboxAddress: q.address, queryDate: q.query_date },
    scope: { inbox: q.inbox_id, queryDate: q.query_date },
  };
}

export interface EpisodeDeps {
  pool: pg.Pool;
  llm: OpenAI;
  skills: Map<string, Skill>;
  teacher?: TeacherEndpoint;
}

/** One episode under its key: the stored one when an earlier attempt finished it, else run and stored. */
export async function episodeOnce(
  { pool, llm }: EpisodeDeps,
  key: TrajectoryKey,
  q: QuestionContext,
  agent: AgentSettings,
  weights: RewardWeights,
): Promise<{ id: number; trajectory: Trajectory; reward: RewardComponents }> {
  const existing = await pool.query<{ id: string }>(
    'SELECT id FROM trajectories WHERE run_id = $1 AND stage = $2 AND step = $3 AND task_id = $4 AND sample = $5',
    [key.runId, key.stage, key.step, key.taskId, key.sample],
  );
  let id: number;
  let trajectory: Trajectory;
  if (existing.rows.length > 0) {
    id = Number(existing.rows[0].id);
    trajectory = await loadTrajectory(pool, id);
  } else {
    trajectory = await runEpisode(llm, pool, q.episode, agent);
    ({ id } = await storeTrajectory(pool, key, q.id, trajectory));
  }
  const reward = deterministicReward(trajectory.facts, q.gold, agent.maxTurns, weights);
  await storeDeterministicReward(pool, id, reward);
  return { id, trajectory, reward };
}

/** A stored episode with its question, for judging it. */
export async function loadEpisode(pool: pg.Pool, trajectoryId: number) {
  const { rows } = await pool.query<{ question_id: string | null }>(
    'SELECT question_id FROM trajectories WHERE id = $1',
    [trajectoryId],
  );
  if (rows.length === 0 || !rows[0].question_id)
    throw ApplicationFailure.nonRetryable(`trajectory ${trajectoryId} not found or has no question`);
  return {
    question: await loadQuestion(pool, rows[0].question_id),
    trajectory: await loadTrajectory(pool, trajectoryId),
  };
}

/** One judgement under its key: the stored one when an earlier attempt finished it, else judged and stored. */
export async function judgementOnce(
  { pool, llm, skills }: EpisodeDeps,
  trajectoryId: number,
  judgeKey: string,
  episode: Awaited<ReturnType<typeof loadEpisode>>,
  settings: JudgeSettings,
): Promise<{ id: number; score: number; failed: boolean; confidence: number }> {
  const stored = await pool.query<{
    id: string;
    score: number;
    failed: boolean;
    verdict: Judgement['verdict'];
  }>('SELECT id, score, failed, verdict FROM judgements WHERE trajectory_id = $1 AND judge_key = $2', [
    trajectoryId,
    judgeKey,
  ]);
  if (stored.rows.length > 0) {
    const r = stored.rows[0];
    return { id: Number(r.id), score: r.score, failed: r.failed, confidence: r.verdict?.confidence ?? 0 };
  }
  const j = await judge(
    llm,
    pool,
    skills,
    {
      question: episode.question.question,
      reference: episode.question.gold.answer,
      scope: episode.question.scope,
      trajectory: episode.trajectory,
    },
    settings,
  );
  const id = await storeJudgement(pool, trajectoryId, judgeKey, settings.model, j);
  return { id, score: j.score, failed: j.failed, confidence: j.verdict?.confidence ?? 0 };
}

/** The teacher's label of a stored episode (cached per trajectory). */
export function labelOf(
  deps: EpisodeDeps,
  trajectoryId: number,
  episode: Awaited<ReturnType<typeof loadEpisode>>,
  weights: RewardWeights,
  maxTurns: number,
): Promise<Label> {
  const { question, trajectory } = episode;
  return teacherLabel(
    deps.pool,
    trajectoryId,
    question.question,
    question.gold,
    trajectory,
    weights,
    maxTurns,
    deps.teacher,
  );
}
