import { ladderTable } from '../../src/cli/experimentCommand';
import { openRunsWarning, sparkline } from '../../src/cli/runFormat';
import { policyJudge, samplingModel, stageInput } from '../../src/grpo/stage';
import { parseAssignments } from '../../src/hyperparameters';
import { parseRunSpec } from '../../src/runSpec';
import { storedRunStatus } from '../../src/runs/storedStatus';

it('parses `run set` assignments by the one schema and names a bad one', () => {
  expect(parseAssignments(['learning_rate=1e-5', 'clip_high=0.3', 'loss_aggregation=dr-grpo'])).toEqual({
    learning_rate: 1e-5,
    clip_high: 0.3,
    loss_aggregation: 'dr-grpo',
  });
  expect(() => parseAssignments(['warmup=3'])).toThrow(/warmup.*Unrecognized key/);
  expect(() => parseAssignments(['learning_rate='])).toThrow(/"learning_rate=": expected key=value/);
  expect(() => parseAssignments(['learning_rate=fast'])).toThrow(
    /learning_rate: Invalid input: expected number/,
  );
  // What the model server would refuse is refused here (the bounds are the server's).
  expect(() => parseAssignments(['learning_rate=5'])).toThrow(/learning_rate: Too big/);
  expect(() => parseAssignments(['clip_high=20'])).toThrow(/clip_high: Too big/);
});

it('draws a sparkline over the series range', () => {
  expect(sparkline([0, 0.5, 1])).toBe('▁▅█');
  expect(sparkline([2, 2])).toBe('▁▁');
  expect(sparkline([])).toBe('');
});

it("flags a ladder whose trained judge scored the policy's shared episodes as the untrained one did", () => {
  const row = { success: 0.25, se: 0.153, n: 8, run: 'r', evaluation: 'e' };
  const ladder = (judges: { episodes: number; differing: number } | null) =>
    ladderTable({
      experimentId: 'x',
      rows: { base: row, warm_start: row, rl_untrained_rm: row, rl_trained_rm: row },
      rm_agreement: { untrained: 0.8, untrained_se: 0.1, trained: 0.8, trained_se: 0.1, n: 6 },
      judges,
      questions: 8,
    }).join('\n');
  expect(ladder({ episodes: 8, differing: 0 })).toMatch(
    /judges on the 8 policy episodes both runs sampled alike: 0 scored differently\n! the trained reward model scored every one/,
  );
  expect(ladder({ episodes: 8, differing: 3 })).toMatch(/8 policy episodes .*: 3 scored differently$/);
  expect(ladder({ episodes: 8, differing: 3 })).not.toMatch(/^!/m);
  expect(ladder(null)).not.toMatch(/judges on/); // a ladder recorded before the comparison existed
});

it('builds every stage from one spec: same loop, different environment, seed-derived adapter init', () => {
  const stage = { steps: 3, tasksPerStep: 2, groupSize: 4, hyperparameters: { learning_rate: 1e-4 } };
  const spec = parseRunSpec({
    name: 'x',
    seed: 5,
    models: { policy: { adapter: 'p' }, rewardModel: { adapter: 'rm' } },
    stages: { rewardModel: stage, policy: { ...stage, hyperparameters: { learning_rate: 2e-4 } } },
  });
  const rm = stageInput(spec, 'run', 'rewardModel');
  const policy = stageInput(spec, 'run', 'policy');
  expect(rm.env.kind).toBe('rewardModel');
  expect(policy.env).toMatchObject({
    kind: 'policy',
    reward: 'reference-free',
    judge: { model: 'rm@step-3', weight: 1 },
  });
  expect([rm.adapter, policy.adapter]).toEqual(['rm', 'p']);
  expect([rm.lora.init_seed, policy.lora.init_seed]).toEqual(['5:rewardModel', '5:policy']);
  expect(policy.hyperparameters).toMatchObject({ learning_rate: 2e-4, clip_low: 0.2, clip_high: 0.28 });
  expect([samplingModel(policy, 1), samplingModel(policy, 2)]).toEqual(['base', 'p@step-1']);

  // With warm starts, the GRPO stages start from their last checkpoint.
  const warm = parseRunSpec({
    ...spec,
    stages: {
      ...spec.stages,
      policyWarmStart: { enabled: true, demonstrations: 10, epochs: 2, tasksPerStep: 4 },
      judgeWarmStart: { enabled: true, demonstrations: 4, epochs: 1, tasksPerStep: 4 },
    },
  });
  const warmPolicy = stageInput(warm, 'run', 'policyWarmStart');
  expect(warmPolicy).toMatchObject({
    adapter: 'p-warm',
    steps: 5,
    objective: 'sft',
    groupSize: 1,
    env: { kind: 'warmStart', target: 'policy' },
  });
  expect(stageInput(warm, 'run', 'policy')).toMatchObject({
    startModel: 'p-warm@step-5',
    lora: { init_from: 'p-warm@step-5' },
  });
  expect(stageInput(warm, 'run', 'rewardModel').lora.init_from).toBe('rm-warm@step-1');
  // Without a reward-model stage, the policy is judged by the untrained (warm-started) judge.
  expect(
    policyJudge({
      ...warm,
      stages: { ...warm.stages, rewardModel: { ...warm.stages.rewardModel, enabled: false } },
    }),
  ).toBe('rm-warm@step-1');
});

it('tells a run status from what it stored when no worker answers', () => {
  const stage = { steps: 3, tasksPerStep: 2, groupSize: 4 };
  const spec = parseRunSpec({
    name: 'x',
    seed: 5,
    models: { policy: { adapter: 'p' }, rewardModel: { adapter: 'rm' } },
    stages: {
      rewardModel: stage,
      policy: stage,
      policyWarmStart: { enabled: true, demonstrations: 8, epochs: 1, tasksPerStep: 4 },
    },
  });
  const row = (stage: string, step: number, reward: number) => ({
    stage,
    step,
    metrics: { 'reward/mean': reward },
  });
  const policyEval = (label: string, successRate: number) => ({
    label,
    kind: 'policy' as const,
    model: label,
    split: 'test',
    metrics: { successRate } as never,
  });
  const status = storedRunStatus(
    {
      runId: 'r',
      name: 'x',
      createdAt: '',
      steps: [row('policyWarmStart', 1, 1), row('policyWarmStart', 2, 1), row('rewardModel', 1, 0.4)],
      evaluations: [policyEval('base', 0.1), policyEval('warm', 0.3)],
      skills: [],
      judgements: { total: 0, failed: 0 },
    },
    spec,
    123,
  );
  expect(status).toMatchObject({ phase: 'rewardModel', startedAt: 123, etaSeconds: null });
  expect(status.stages.policyWarmStart).toMatchObject({ step: 2, totalSteps: 2, phase: 'done' });
  expect(status.stages.rewardModel).toMatchObject({ step: 1, totalSteps: 3, phase: 'unknown' });
  expect(status.stages.rewardModel?.latest).toEqual({ 'reward/mean': 0.4 });
  expect(status.checkpoints).toEqual({ 'p-warm': 2, rm: 1 });
  expect(status.best?.label).toBe('warm');
});

it('warns of runs an earlier job left open, and of nothing else', () => {
  const run = (runId: string, workflowStatus: string) => ({
    runId,
    name: null,
    state: workflowStatus === 'RUNNING' ? 'running' : 'done',
    stage: 'policy',
    step: 1,
    startedAt: '2026-12-07T16:02:16.000Z',
    workflowStatus,
  });
  expect(openRunsWarning([run('old/done', 'COMPLETED')])).toEqual([]);
  const lines = openRunsWarning([run('old/trained-rm', 'RUNNING'), run('old/done', 'COMPLETED')]);
  expect(lines[0]).toMatch(/^! 1 run\(s\) of an earlier job are still open/);
  expect(lines[1]).toBe('    old/trained-rm  running, policy step 1, started 2026-12-07T16:02:16.000Z');
  expect(lines[2]).toMatch(/evalrl run cancel RUN_ID/);
});
