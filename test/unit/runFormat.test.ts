import { parseAssignments, sparkline } from '../../src/cli/runFormat';
import { samplingModel, stageInput } from '../../src/grpo/stage';
import { parseRunSpec } from '../../src/runSpec';

it('parses `run set` assignments and names a bad one', () => {
  expect(parseAssignments(['lr=1e-5', 'clip_high=0.3', 'loss_aggregation=dr-grpo'])).toEqual({
    learning_rate: 1e-5,
    clip_high: 0.3,
    loss_aggregation: 'dr-grpo',
  });
  expect(() => parseAssignments(['warmup=3'])).toThrow(/"warmup=3": expected key=value with key one of lr/);
  expect(() => parseAssignments(['lr='])).toThrow(/"lr=": expected key=value/);
  expect(() => parseAssignments(['lr=fast'])).toThrow(/"lr=fast": lr takes a number/);
});

it('draws a sparkline over the series range', () => {
  expect(sparkline([0, 0.5, 1])).toBe('▁▅█');
  expect(sparkline([2, 2])).toBe('▁▁');
  expect(sparkline([])).toBe('');
});

it('builds both stages from one spec: same loop, different environment, seed-derived adapter init', () => {
  const stage = { steps: 3, tasksPerStep: 2, groupSize: 4, learningRate: 1e-4 };
  const spec = parseRunSpec({
    name: 'x',
    seed: 5,
    models: { policy: { adapter: 'p' }, rewardModel: { adapter: 'rm' } },
    stages: { rewardModel: stage, policy: { ...stage, learningRate: 2e-4 } },
  });
  const rm = stageInput(spec, 'run', 'rewardModel', 'base');
  const policy = stageInput(spec, 'run', 'policy', 'rm');
  expect(rm.env.kind).toBe('rewardModel');
  expect(policy.env).toMatchObject({ kind: 'policy', judge: { model: 'rm', weight: 1 } });
  expect([rm.adapter, policy.adapter]).toEqual(['rm', 'p']);
  expect([rm.lora.init_seed, policy.lora.init_seed]).toEqual(['5:rewardModel', '5:policy']);
  expect(policy.hyperparameters).toMatchObject({ learning_rate: 2e-4, clip_low: 0.2, clip_high: 0.28 });
  expect([samplingModel('p', 1), samplingModel('p', 2)]).toEqual(['base', 'p']);
});
