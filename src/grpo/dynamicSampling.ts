import { groupStd } from './advantages';

export interface RewardGroup {
  taskId: string;
  rewards_G: number[];
}

/**
 * Dynamic sampling: a group whose rewards barely vary teaches nothing (every advantage is ~0), so it is
 * dropped. Returns the kept groups (at most `wanted`, in order) and the dropped task ids; `missing` says
 * how many more groups a top-up should bring.
 */
export function selectGroups<G extends RewardGroup>(
  groups: G[],
  wanted: number,
  minStd: number,
  enabled: boolean,
) {
  const kept: G[] = [];
  const dropped: string[] = [];
  for (const g of groups) {
    if (enabled && groupStd(g.rewards_G) < minStd) dropped.push(g.taskId);
    else if (kept.length < wanted) kept.push(g);
  }
  return { kept, dropped, missing: Math.max(0, wanted - kept.length) };
}
