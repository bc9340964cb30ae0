import { createHash } from 'node:crypto';
import type { RewardComponents } from './deterministic';

/** Standard error of a proportion p over n samples. */
export const proportionSe = (p: number, n: number) => (n > 0 ? Math.sqrt((p * (1 - p)) / n) : 0);

export interface PolicyMetrics {
  episodes: number;
  successRate: number;
  /** Standard error of the success rate. */
  successSe: number;
  idkRate: number;
  /** Answered, not "I don't know", and wrong: the hallucination rate. */
  wrongRate: number;
  meanTurns: number;
}

export function policyMetrics(rewards: RewardComponents[]): PolicyMetrics {
  const n = rewards.length;
  const share = (f: (r: RewardComponents) => boolean) => (n ? rewards.filter(f).length / n : 0);
  const successRate = share((r) => r.correct);
  return {
    episodes: n,
    successRate,
    successSe: proportionSe(successRate, n),
    idkRate: share((r) => r.idk),
    wrongRate: share((r) => r.answered && !r.idk && !r.correct),
    meanTurns: n ? rewards.reduce((s, r) => s + r.turns, 0) / n : 0,
  };
}

export interface RmJudgement {
  score: number;
  confidence: number;
  failed: boolean;
  /** The teacher's label: was the agent's answer correct? */
  label: boolean;
}

export interface RmMetrics {
  judgements: number;
  failures: number;
  /** Episodes labelled correct among the judged ones: 0.5 for balanced data. */
  positiveShare: number;
  agreement: number;
  agreementSe: number;
  precision: number;
  precisionSe: number;
  recall: number;
  recallSe: number;
  /** Expected calibration error of the judge's confidence in its own call (10 bins). */
  ece: number;
  /** Its standard error, by a seeded bootstrap. */
  eceSe: number;
}

function ece(items: RmJudgement[], agree: boolean[]): number {
  if (items.length === 0) return 0;
  const bins = Array.from({ length: 10 }, () => ({ n: 0, confidence: 0, correct: 0 }));
  items.forEach((j, i) => {
    const bin = bins[Math.min(9, Math.floor(j.confidence * 10))];
    bin.n++;
    bin.confidence += j.confidence;
    bin.correct += agree[i] ? 1 : 0;
  });
  return bins.reduce(
    (s, b) => s + (b.n ? (b.n / items.length) * Math.abs(b.confidence / b.n - b.correct / b.n) : 0),
    0,
  );
}

/** A judgement says "correct" when its score is at least the threshold; a failed judgement says "incorrect". */
export function rmMetrics(items: RmJudgement[], threshold = 0.5): RmMetrics {
  const said = items.map((j) => !j.failed && j.score >= threshold);
  const agree = items.map((j, i) => said[i] === j.label);
  const tp = items.filter((j, i) => said[i] && j.label).length;
  const predicted = said.filter(Boolean).length;
  const positives = items.filter((j) => j.label).length;
  const agreement = items.length ? agree.filter(Boolean).length / items.length : 0;
  const precision = predicted ? tp / predicted : 0;
  const recall = positives ? tp / positives : 0;
  // Bootstrap of the ECE, seeded by the data itself so that the figure is reproducible.
  let state = createHash('sha256').update(JSON.stringify(items)).digest().readUInt32LE(0) || 1;
  const next = () => (state = (Math.imul(state, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  const resampled = Array.from({ length: items.length ? 200 : 0 }, () => {
    const idx = items.map(() => Math.floor(next() * items.length));
    return ece(
      idx.map((i) => items[i]),
      idx.map((i) => agree[i]),
    );
  });
  const meanEce = resampled.reduce((a, b) => a + b, 0) / Math.max(1, resampled.length);
  return {
    judgements: items.length,
    failures: items.filter((j) => j.failed).length,
    positiveShare: items.length ? positives / items.length : 0,
    agreement,
    agreementSe: proportionSe(agreement, items.length),
    precision,
    precisionSe: proportionSe(precision, predicted),
    recall,
    recallSe: proportionSe(recall, positives),
    ece: ece(items, agree),
    eceSe: Math.sqrt(resampled.reduce((a, b) => a + (b - meanEce) ** 2, 0) / Math.max(1, resampled.length)),
  };
}
