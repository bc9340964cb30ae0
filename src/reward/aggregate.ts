import { z } from 'zod';
import type { VerifierResult } from './verifiers';

/** The judge's closing call (Skill-RM's final_answer contract). */
export const verdictSchema = z
  .object({
    reason: z.string().min(1),
    satisfied_count: z.number().int().min(0),
    total_count: z.number().int().min(1),
    score: z.number().min(0).max(1),
    confidence: z.number().min(0).max(1),
    used_resources: z.array(z.string()).default([]),
  })
  .refine((v) => v.satisfied_count <= v.total_count, {
    message: 'satisfied_count exceeds total_count',
    path: ['satisfied_count'],
  });
export type Verdict = z.infer<typeof verdictSchema>;

export const CRITICAL_CAP = 0.2;
export const VERIFIED_WRONG_CAP = 0.2;
export const VERIFIED_RIGHT_FLOOR = 0.6;

/**
 * The aggregation policy, explicit: base = satisfied / total (the judge's counts, not its free score);
 * a critical verifier failure caps it; the answer-correctness verifier overrides the judge's opinion
 * either way (a verified wrong answer is capped, a verified right one floored).
 */
export function aggregate(
  verdict: Verdict,
  evidence: VerifierResult[],
): { score: number; applied: string[] } {
  let score = verdict.satisfied_count / verdict.total_count;
  const applied: string[] = [`base ${verdict.satisfied_count}/${verdict.total_count}`];
  const critical = evidence.filter((e) => e.critical && !e.passed);
  if (critical.length > 0 && score > CRITICAL_CAP) {
    score = CRITICAL_CAP;
    applied.push(`cap ${CRITICAL_CAP}: critical failure in ${critical.map((e) => e.verifier).join(', ')}`);
  }
  const correctness = evidence.find((e) => e.verifier === 'answer_matches_reference');
  if (correctness && !correctness.passed && score > VERIFIED_WRONG_CAP) {
    score = VERIFIED_WRONG_CAP;
    applied.push(`cap ${VERIFIED_WRONG_CAP}: verifier found the answer wrong`);
  }
  if (correctness?.passed && critical.length === 0 && score < VERIFIED_RIGHT_FLOOR) {
    score = VERIFIED_RIGHT_FLOOR;
    applied.push(`floor ${VERIFIED_RIGHT_FLOOR}: verifier found the answer right`);
  }
  return { score, applied };
}
