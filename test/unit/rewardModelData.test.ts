import { balancedTasks, wrongAnswer } from '../../src/env/rewardModelData';
import { evaluationJudgeSettings, judgementReward } from '../../src/env/rewardModelEnv';
import { checkAnswer } from '../../src/reward/answerMatch';
import { referenceFreeReward, rewardWeightsSchema } from '../../src/reward/deterministic';
import { healthFlags } from '../../src/runs/health';
import { episodeFacts } from '../episodeFacts';

describe('reward-model data', () => {
  it('rewards a verdict by its agreement with the label, and a failed judgement below every verdict', () => {
    const verdict = (score: number) => ({ id: 1, score, failed: false, confidence: 0.8, usedTools: true });
    expect(judgementReward(verdict(1), true)).toBe(1);
    expect(judgementReward(verdict(0.25), false)).toBe(0.75);
    expect(judgementReward(verdict(1), false)).toBe(0); // the worst verdict
    const failed = { ...verdict(0), failed: true };
    expect(judgementReward(failed, false)).toBe(-0.5); // it ran verifiers, gave no verdict
    expect(judgementReward({ ...failed, usedTools: false }, false)).toBe(-1); // no valid call at all
    expect(judgementReward(null, true)).toBe(-1);
  });
  it('evaluates a judge as it scores the policy, with the same seed for every judge', () => {
    const judge = {
      mode: 'skill' as const,
      reference: 'hidden' as const,
      retries: 1,
      temperature: 0.7,
      maxTurns: 3,
      maxTokensPerTurn: 160,
      contextTokens: 2048,
      topP: 1,
      timeoutMs: 600_000,
    };
    const config = { kind: 'rewardModel' as const, judge, scoringTemperature: 0, balance: true, seed: 7 };
    const untrained = evaluationJudgeSettings(config, 'rm-warm@step-8', 7, 'task-1');
    const trained = evaluationJudgeSettings(config, 'rm@step-3', 7, 'task-1');
    // Scored as the policy is scored (here greedily), not at the temperature its GRPO groups sample with.
    expect(untrained).toMatchObject({ temperature: 0, model: 'rm-warm@step-8', maxTurns: 3 });
    expect(trained.seed).toBe(untrained.seed);
    expect(evaluationJudgeSettings(config, 'rm@step-3', 7, 'task-2').seed).not.toBe(trained.seed);
  });
  it('balances correct and incorrect candidates, seeded', () => {
    const candidates = [
      ...['a', 'b'].map((task) => ({ task, correct: true })),
      ...['c', 'd', 'e', 'f'].map((task) => ({ task, correct: false })),
    ];
    const chosen = balancedTasks(candidates, 3, true);
    expect(chosen).toHaveLength(4);
    expect(chosen.filter((t) => ['a', 'b'].includes(t))).toHaveLength(2);
    expect(balancedTasks(candidates, 3, true)).toEqual(chosen);
    expect(balancedTasks(candidates, 3, false)).toHaveLength(6);
    expect(balancedTasks(candidates.slice(2), 3, true)).toEqual([]); // one class only: nothing to balance with
  });
  it('corrupts an answer into a plausible wrong one of the same kind', () => {
    const sender = wrongAnswer(
      'phillip.allen@enron.com',
      ['stagecoachmama@hotmail.com', 'phillip.allen@enron.com'],
      [],
    );
    expect(sender).toBe('stagecoachmama@hotmail.com');
    expect(wrongAnswer('2000-12-14', [], [])).toBe('2000-12-17');
    expect(wrongAnswer('December 14, 2000', [], [])).toBe('2000-12-17');
    expect(wrongAnswer('$1,500', [], [])).toBe('$15,000');
    const subject = wrongAnswer(
      'Lease data',
      [],
      ['m1 | 2001-01-02 | a@b.com | Lease data | …\nm2 | 2001-01-03 | x@y.com | Gas tariff filing | …'],
    );
    expect(subject).toBe('Gas tariff filing');
    for (const [answer, wrong] of [
      ['phillip.allen@enron.com', sender],
      ['2000-12-14', '2000-12-17'],
      ['$1,500', '$15,000'],
    ])
      expect(checkAnswer(wrong!, answer!).correct).toBe(false); // a corrupted answer is really wrong
    expect(wrongAnswer('phillip.allen@enron.com', ['phillip.allen@enron.com'], [])).toBeNull();
  });
});

describe('reference-free reward', () => {
  const W = rewardWeightsSchema.parse({});
  it('rewards format, valid tool use and citing a read email — never the answer itself', () => {
    const read = episodeFacts({ answer: 'x', sources: ['<1>'], readIds: ['<1>'], searchedIds: ['<1>'] });
    expect(referenceFreeReward(read, W)).toBeCloseTo(W.citedRead);
    expect(referenceFreeReward({ ...read, answer: 'y' }, W)).toBe(referenceFreeReward(read, W));
    expect(referenceFreeReward({ ...read, sources: ['<9>'] }, W)).toBeCloseTo(W.hallucinatedSource);
    expect(referenceFreeReward({ ...read, badArguments: 2 }, W)).toBeCloseTo(W.citedRead + 2 * W.badCall);
    expect(
      referenceFreeReward(episodeFacts({ answer: null, ending: 'malformed', malformedCalls: 2 }), W),
    ).toBe(W.malformed);
  });
});

describe('learning-signal health', () => {
  it('flags flat groups, failed samples, an unmoved adapter and one-class reward-model data', () => {
    const steps: { stage: string; step: number; metrics: Record<string, number> }[] = [
      { stage: 'policy', step: 1, metrics: { 'groups/zero_variance': 0, 'optim/update_norm': 0.1 } },
      {
        stage: 'policy',
        step: 2,
        metrics: {
          'groups/zero_variance': 1,
          'samples/failed': 0.5,
          'optim/update_norm': 0,
          'optim/no_signal': 1,
        },
      },
      { stage: 'policyWarmStart', step: 3, metrics: { 'groups/zero_variance': 1, 'optim/update_norm': 0.2 } },
    ];
    const evaluations = [
      {
        label: 'rewardModel:untrained',
        kind: 'rewardModel' as const,
        model: 'base',
        metrics: { positiveShare: 0, judgements: 20, failures: 20 },
      },
    ];
    const flags = healthFlags(steps, evaluations);
    expect(flags.map((f) => `${f.stage}:${f.flag}`)).toEqual([
      'policy:zero-variance groups',
      'policy:failed samples',
      'policy:adapter did not move',
      'rewardModel:untrained:one label class',
      'rewardModel:untrained:failed judgements',
    ]);
    expect(flags[0]).toMatchObject({ step: 2, advice: expect.stringMatching(/more samples per group/) });
    expect(flags[2].meaning).toMatch(/no sample carried an advantage/);
    expect(healthFlags(steps.slice(0, 1), [])).toEqual([]);
  });
});
