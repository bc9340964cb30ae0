import type { RewardComponents } from './deterministic';

export interface PolicyMetrics {
  episodes: number;
  successRate: number;
  idkRate: number;
  /** Answered, not "I don't know", and wrong: the hallucination rate. */
  wrongRate: number;
  meanTurns: number;
}

export function policyMetrics(rewards: RewardComponents[]): PolicyMetrics {
  const n = rewards.length;
  const share = (f: (r: RewardComponents) => boolean) => (n ? rewards.filter(f).length / n : 0);
  return {
    episodes: n,
    successRate: share((r) => r.correct),
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
  agreement: number;
  precision: number;
  recall: number;
  /** Expected calibration error of the judge's confidence in its own call (10 bins). */
  ece: number;
}

/** A judgement says "correct" when its score is at least the threshold; a failed judgement says "incorrect". */
export function rmMetrics(items: RmJudgement[], threshold = 0.5): RmMetrics {
  const said = items.map((j) => !j.failed && j.score >= threshold);
  const agree = items.map((j, i) => said[i] === j.label);
  const tp = items.filter((j, i) => said[i] && j.label).length;
  const predicted = said.filter(Boolean).length;
  const positives = items.filter((j) => j.label).length;
  const bins = Array.from({ length: 10 }, () => ({ n: 0, confidence: 0, correct: 0 }));
  items.forEach((j, i) => {
    const bin = bins[Math.min(9, Math.floor(j.confidence * 10))];
    bin.n++;
    bin.confidence += j.confidence;
    bin.correct += agree[i] ? 1 : 0;
  });
  const ece = items.length
    ? bins.reduce(
        (s, b) => s + (b.n ? (b.n / items.length) * Math.abs(b.confidence / b.n - b.correct / b.n) : 0),
        0,
      )
    : 0;
  return {
    judgements: items.length,
    failures: items.filter((j) => j.failed).length,
    agreement: items.length ? agree.filter(Boolean).length / items.length : 0,
    precision: predicted ? tp / predicted : 0,
    recall: positives ? tp / positives : 0,
    ece,
  };
}
