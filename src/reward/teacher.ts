import OpenAI from 'openai';
import type pg from 'pg';
import { z } from 'zod';
import type { Trajectory } from '../env/trajectory';
import { deterministicReward, type Gold, type RewardWeights } from './deterministic';

export interface TeacherEndpoint {
  url: string;
  model: string;
  apiKey?: string;
}

const labelSchema = z.object({ correct: z.boolean(), reason: z.string().min(1) });

export interface Label {
  correct: boolean;
  reason: string;
  source: string;
}

/**
 * The label a reward model learns to agree with: a stronger judge's when one is configured, else the
 * deterministic layer's (answer correct against the reference). Cached per trajectory, so a trajectory is
 * labelled once however often the stage asks.
 */
export async function teacherLabel(
  pool: pg.Pool,
  trajectoryId: number,
  question: string,
  gold: Gold,
  trajectory: Trajectory,
  weights: RewardWeights,
  maxTurns: number,
  teacher?: TeacherEndpoint,
): Promise<Label> {
  const cached = await pool.query<Label>(
    'SELECT correct, reason, source FROM teacher_labels WHERE trajectory_id = $1',
    [trajectoryId],
  );
  if (cached.rows.length > 0) return cached.rows[0];
  const label = teacher
    ? await askTeacher(teacher, question, gold, trajectory)
    : deterministicLabel(gold, trajectory, weights, maxTurns);
  await pool.query(
    'INSERT INTO teacher_labels (trajectory_id, correct, reason, source) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING',
    [trajectoryId, label.correct, label.reason, label.source],
  );
  return label;
}

function deterministicLabel(gold: Gold, t: Trajectory, weights: RewardWeights, maxTurns: number): Label {
  const r = deterministicReward(t.facts, gold, maxTurns, weights);
  return {
    correct: r.correct,
    reason: `exact=${r.exactMatch} f1=${r.tokenF1.toFixed(2)} dates/numbers=${r.datesNumbersMatch}`,
    source: 'deterministic',
  };
}

async function askTeacher(
  teacher: TeacherEndpoint,
  question: string,
  gold: Gold,
  t: Trajectory,
): Promise<Label> {
  const client = new OpenAI({ baseURL: teacher.url, apiKey: teacher.apiKey ?? 'unused', timeout: 120_000 });
  const prompt = [
    'Judge whether an email-search agent answered a question correctly.',
    `Question: ${question}`,
    `Reference answer: ${gold.answer}`,
    `Agent's answer: ${t.facts.answer ?? '(no answer)'}`,
    `Agent's sources: ${t.facts.sources.join(', ') || '(none)'}`,
    'Reply with JSON only: {"correct": true|false, "reason": "..."}',
  ].join('\n');
  for (let attempt = 0; attempt < 3; attempt++) {
    const completion = await client.chat.completions.create({
      model: teacher.model,
      messages: [{ role: 'user', content: prompt }],
      temperature: 0,
    });
    const text = completion.choices[0]?.message.content ?? '';
    const parsed = labelSchema.safeParse(safeJson(text.slice(text.indexOf('{'), text.lastIndexOf('}') + 1)));
    if (parsed.success) return { ...parsed.data, source: `teacher:${teacher.model}` };
  }
  throw new Error(`teacher ${teacher.model} at ${teacher.url} gave no parseable label after 3 attempts`);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
