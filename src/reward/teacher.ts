import { z } from 'zod';
import type { Trajectory } from '../env/trajectory';
import { redact } from '../redact';
import { deterministicReward, type Gold, type RewardWeights } from './deterministic';
import { askTeacher, parseTeacherReply, type TeacherEndpoint } from './teacherClient';

const labelSchema = z.object({ correct: z.boolean(), reason: z.string().min(1) });

export interface Label {
  correct: boolean;
  reason: string;
  source: string;
}

/**
 * The label a reward model learns to agree with: a stronger judge's when one is configured (it sees the whole
 * trajectory and the reference), else the deterministic layer's check of the answer against the reference.
 */
export async function teacherLabel(
  question: string,
  gold: Gold,
  trajectory: Trajectory,
  weights: RewardWeights,
  maxTurns: number,
  teacher?: TeacherEndpoint,
): Promise<Label> {
  return teacher
    ? askForLabel(teacher, question, gold, trajectory)
    : deterministicLabel(gold, trajectory, weights, maxTurns);
}

export function deterministicLabel(
  gold: Gold,
  t: Trajectory,
  weights: RewardWeights,
  maxTurns: number,
): Label {
  const r = deterministicReward(t.facts, gold, maxTurns, weights);
  return {
    correct: r.correct,
    reason: `exact=${r.exactMatch} f1=${r.tokenF1.toFixed(2)} dates/numbers=${r.datesNumbersMatch}`,
    source: 'deterministic',
  };
}

/** The episode as the teacher reads it: every call and (shortened) result, then the answer. */
export function transcript(t: Trajectory): string {
  return t.messages
    .filter((m) => m.role !== 'system')
    .map((m) => {
      const calls = (m.tool_calls ?? []).map((c) => `${c.function.name}(${c.function.arguments})`).join('; ');
      const text = (m.content ?? '').slice(0, 600);
      return `[${m.role}] ${[text, calls].filter(Boolean).join(' ')}`;
    })
    .join('\n');
}

async function askForLabel(
  teacher: TeacherEndpoint,
  question: string,
  gold: Gold,
  t: Trajectory,
): Promise<Label> {
  const prompt = [
    'Judge whether an email-search agent answered a question correctly and from the right email.',
    `Question: ${question}`,
    `Reference answer: ${gold.answer}`,
    `The agent's episode:\n${transcript(t)}`,
    `Agent's final answer: ${t.facts.answer ?? '(no answer)'}; sources: ${t.facts.sources.join(', ') || '(none)'}`,
    'Reply with JSON only: {"correct": true|false, "reason": "..."}',
  ].join('\n');
  for (let attempt = 0; attempt < 3; attempt++) {
    const label = parseTeacherReply(await askTeacher(teacher, prompt, labelSchema, 'label'), labelSchema);
    if (label) return { ...label, source: `teacher:${teacher.model}` };
  }
  throw new Error(
    redact(`teacher ${teacher.model} at ${teacher.url} gave no parseable label after 3 attempts`),
  );
}
