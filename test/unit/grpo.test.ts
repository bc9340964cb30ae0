import { groupAdvantages, groupStd } from '../../src/grpo/advantages';
import { selectGroups } from '../../src/grpo/dynamicSampling';
import { epochBatch, evaluationTasks, interleaveBy, sampleTasks } from '../../src/grpo/sampleTasks';
import { trainingSequences } from '../../src/grpo/trainingSequences';
import { groupJudgeScores } from '../../src/env/policyEnv';

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

describe('groupJudgeScores', () => {
  it('gives a failed judgement the mean of the valid ones, so it adds no advantage', () => {
    const scores = groupJudgeScores([
      { score: 1, failed: false },
      { score: 0, failed: true },
      { score: 0.5, failed: false },
      { score: 0, failed: false },
    ]);
    expect(scores).toEqual([1, 0.5, 0.5, 0]);
    // The failed episode's advantage from the judge is 0, where a score of 0 would have pushed it down.
    expect(groupAdvantages(scores, false)[1]).toBeCloseTo(0);
    expect(groupAdvantages([1, 0, 0.5, 0], false)[1]).toBeLessThan(0);
  });
  it('is 0 for every episode when no judgement is valid', () => {
    expect(
      groupJudgeScores([
        { score: 0.9, failed: true },
        { score: 0, failed: true },
      ]),
    ).toEqual([0, 0]);
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
  it('continues the same order for top-ups', () => {
    const first = sampleTasks(ids, 1, 'policy', 3, 4);
    const more = sampleTasks(ids, 1, 'policy', 3, 4, { offset: 4 });
    expect(more).toHaveLength(4);
    expect(more.filter((id) => first.includes(id))).toEqual([]);
  });
  it('draws the strata in turn, so that no class fills a step', () => {
    const label = (id: string) => (Number(id.slice(1)) < 40 ? 'incorrect' : 'correct');
    for (let step = 1; step <= 20; step++) {
      const drawn = sampleTasks(ids, 1, 'rewardModel', step, 4, { stratum: label });
      expect(drawn.filter((id) => label(id) === 'correct')).toHaveLength(2);
      const more = sampleTasks(ids, 1, 'rewardModel', step, 4, { stratum: label, offset: 4 });
      expect(more.filter((id) => drawn.includes(id))).toEqual([]);
    }
    // Unstratified, some step of 4 drawn from a 40/10 pool has no correct task at all.
    const unstratified = Array.from({ length: 20 }, (_, step) =>
      sampleTasks(ids, 1, 'rewardModel', step + 1, 4),
    );
    expect(unstratified.some((drawn) => drawn.every((id) => label(id) === 'incorrect'))).toBe(true);
  });
});

describe('evaluationTasks', () => {
  it('is the same for every model and covers every kind of task', () => {
    const ids = Array.from({ length: 60 }, (_, i) => `q${i}`);
    const kind = (id: string) => (Number(id.slice(1)) < 50 ? 'when_sent' : 'subject');
    const drawn = evaluationTasks(ids, { seed: 3, count: 8 }, kind);
    expect(drawn).toEqual(evaluationTasks([...ids].reverse(), { seed: 3, count: 8 }, kind));
    expect(drawn.filter((id) => kind(id) === 'subject')).toHaveLength(4);
  });
});

describe('epochBatch', () => {
  const ids = ['a', 'b', 'c', 'd', 'e'];
  it('shows every task once per epoch, in a seeded order per epoch', () => {
    const epoch1 = [1, 2, 3].flatMap((step) => epochBatch(ids, 7, 'warm', step, 2)).slice(0, 5);
    expect([...epoch1].sort()).toEqual(ids);
    const steps = Array.from({ length: 10 }, (_, i) => epochBatch(ids, 7, 'warm', i + 1, 2)).flat();
    expect(steps.filter((t) => t === 'c')).toHaveLength(4); // four epochs of five in twenty places
    expect(epochBatch(ids, 7, 'warm', 1, 2)).toEqual(epochBatch([...ids].reverse(), 7, 'warm', 1, 2));
    expect(epochBatch([], 7, 'warm', 1, 2)).toEqual([]);
  });
});

describe('trainingSequences', () => {
  const turn = (prompt: number[], tokens: number[]) => ({
    promptTokenIds: prompt,
    tokenIds: tokens,
    logprobs: tokens.map(() => -0.5),
    finishReason: 'stop',
    modelMs: 1,
    toolMs: 1,
  });
  it('merges turns whose prompt extends the previous prompt and reply into one sequence', () => {
    const [seq, ...rest] = trainingSequences([turn([1, 2], [3, 4]), turn([1, 2, 3, 4, 5, 6], [7])], 0.5);
    expect(rest).toEqual([]);
    expect(seq).toEqual({
      token_ids: [1, 2, 3, 4, 5, 6, 7],
      mask: [0, 0, 1, 1, 0, 0, 1],
      logprobs: [0, 0, -0.5, -0.5, 0, 0, -0.5],
      advantage: 0.5,
    });
  });
  it('starts a new sequence where the template re-rendered a reply differently, and skips empty turns', () => {
    const seqs = trainingSequences([turn([1, 2], [3, 4]), turn([1, 2, 9, 5], [7]), turn([1], [])], -1);
    expect(seqs.map((s) => s.token_ids)).toEqual([
      [1, 2, 3, 4],
      [1, 2, 9, 5, 7],
    ]);
  });
  it('refuses a turn that came back without its sampled tokens instead of training without it', () => {
    const untokenised = { ...turn([1, 2], [3]), tokenIds: undefined };
    expect(() => trainingSequences([turn([1, 2], [3, 4]), untokenised], 1)).toThrow(
      /turn 2 came back without its token ids.*return_token_ids/,
    );
    const short = { ...turn([1, 2], [3, 4]), logprobs: [-0.5] };
    expect(() => trainingSequences([short], 1)).toThrow(/turn 1/);
  });
});

describe('interleaveBy', () => {
  it('takes each kind in turn, keeping the order within a kind', () => {
    const items = ['d1', 'd2', 'd3', 'w1', 'd4', 's1', 'w2'];
    expect(interleaveBy(items, (x) => x[0])).toEqual(['d1', 'w1', 's1', 'd2', 'w2', 'd3', 'd4']);
  });
});
