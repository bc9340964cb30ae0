import { groupAdvantages, groupStd } from '../../src/grpo/advantages';
import { selectGroups } from '../../src/grpo/dynamicSampling';
import { sampleTasks } from '../../src/grpo/sampleTasks';

describe('groupAdvantages', () => {
  it('centres on the group mean and, for GRPO, scales by the group std', () => {
    expect(groupAdvantages([1, 0, 0, -1], false)).toEqual([1, 0, 0, -1]);
    const a = groupAdvantages([1, 0, 0, -1], true);
    expect(a[0]).toBeCloseTo(1 / Math.sqrt(0.5));
    expect(a.reduce((s, x) => s + x, 0)).toBeCloseTo(0);
  });
  it('gives zero advantages to a constant group', () => {
    expect(groupAdvantages([0.5, 0.5, 0.5], true)).toEqual([0, 0, 0]);
    expect(groupStd([2, 2])).toBe(0);
  });
});

describe('selectGroups', () => {
  const groups = [
    { taskId: 'a', rewards_G: [1, 1, 1] },
    { taskId: 'b', rewards_G: [1, 0, 1] },
    { taskId: 'c', rewards_G: [0, 0, 0.001] },
    { taskId: 'd', rewards_G: [-1, 1, 0] },
  ];
  it('drops near-zero-variance groups and says how many to top up', () => {
    expect(selectGroups(groups, 3, 0.01, true)).toEqual({
      kept: [groups[1], groups[3]],
      dropped: ['a', 'c'],
      missing: 1,
    });
  });
  it('keeps everything (up to the wanted count) when disabled', () => {
    expect(selectGroups(groups, 3, 0.01, false)).toMatchObject({
      kept: groups.slice(0, 3),
      dropped: [],
      missing: 0,
    });
  });
});

describe('sampleTasks', () => {
  const ids = Array.from({ length: 50 }, (_, i) => `q${i}`);
  it('is deterministic per (seed, stage, step) and varies with each', () => {
    expect(sampleTasks(ids, 1, 'policy', 3, 8)).toEqual(sampleTasks([...ids].reverse(), 1, 'policy', 3, 8));
    expect(sampleTasks(ids, 1, 'policy', 3, 8)).not.toEqual(sampleTasks(ids, 1, 'policy', 4, 8));
    expect(sampleTasks(ids, 1, 'policy', 3, 8)).not.toEqual(sampleTasks(ids, 2, 'policy', 3, 8));
  });
  it('skips zero-variance tasks and continues the same order for top-ups', () => {
    const first = sampleTasks(ids, 1, 'policy', 3, 4);
    const skip = new Set(first.slice(0, 2));
    expect(sampleTasks(ids, 1, 'policy', 3, 4, skip)).not.toContain(first[0]);
    const more = sampleTasks(ids, 1, 'policy', 3, 4, new Set(), 4);
    expect(more.filter((id) => first.includes(id))).toEqual([]);
  });
});
