/**
 * Group-relative advantages: each sample's reward minus its group's mean, optionally divided by the group's
 * standard deviation (GRPO). Dr.GRPO drops the division, which removes the bias toward low-variance groups.
 */
export function groupAdvantages(rewards_G: number[], divideByStd: boolean, eps = 1e-6): number[] {
  if (rewards_G.length === 0) throw new Error('groupAdvantages: empty group');
  const mean = rewards_G.reduce((a, b) => a + b, 0) / rewards_G.length;
  const std = groupStd(rewards_G);
  return rewards_G.map((r) => (divideByStd ? (r - mean) / (std + eps) : r - mean));
}

/** Population standard deviation of a group's rewards. */
export function groupStd(rewards_G: number[]): number {
  const mean = rewards_G.reduce((a, b) => a + b, 0) / rewards_G.length;
  return Math.sqrt(rewards_G.reduce((a, r) => a + (r - mean) ** 2, 0) / rewards_G.length);
}
