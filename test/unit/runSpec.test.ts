import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stageInput } from '../../src/grpo/stage';
import { loadRunSpec, parseRunSpec, RunSpecError } from '../../src/runSpec';

const stage = { steps: 2, tasksPerStep: 4, groupSize: 4, hyperparameters: { learning_rate: 1e-5 } };
const minimal = {
  name: 'demo',
  seed: 1,
  models: { policy: { adapter: 'policy' }, rewardModel: { adapter: 'rm' } },
  stages: { rewardModel: stage, policy: stage },
};

function problems(value: unknown): string[] {
  try {
    parseRunSpec(value);
  } catch (err) {
    if (err instanceof RunSpecError) return err.problems;
    throw err;
  }
  throw new Error('expected a RunSpecError');
}

describe('run spec', () => {
  it('refuses what nothing reads and combinations that cannot work', () => {
    expect(
      problems({ ...minimal, models: { ...minimal.models, policy: { adapter: 'p', base: '/models/x' } } }),
    ).toEqual([expect.stringMatching(/^models\.policy\.base: Unrecognized key/)]);
    expect(
      problems({ ...minimal, models: { policy: { adapter: 'same' }, rewardModel: { adapter: 'same' } } }),
    ).toEqual([expect.stringMatching(/^models\.rewardModel\.adapter: must differ/)]);
    expect(problems({ ...minimal, judge: { weight: 0 } })).toEqual([
      expect.stringMatching(/^judge\.weight: a reference-free reward needs/),
    ]);
  });

  it("caps a step's fan-out at Temporal's limits and refuses unknown reward weights (issue 47)", () => {
    const big = (g: object) => ({ ...minimal, stages: { rewardModel: stage, policy: { ...stage, ...g } } });
    expect(problems(big({ tasksPerStep: 2001 }))).toEqual([
      expect.stringMatching(/^stages\.policy\.tasksPerStep: at most 2000: .*pending activit/),
    ]);
    expect(problems(big({ groupSize: 20_000 }))).toEqual([
      expect.stringMatching(/^stages\.policy\.groupSize: at most 16384: .*2 MiB/),
    ]);
    expect(problems(big({ tasksPerStep: 1000, groupSize: 8 }))).toEqual([
      expect.stringMatching(
        /^stages\.policy: tasksPerStep × groupSize × \(1 \+ dynamicSampling\.maxTopUps\) = 24000 samples .*2 MiB/,
      ),
    ]);
    expect(() =>
      parseRunSpec(big({ tasksPerStep: 1000, groupSize: 8, dynamicSampling: { enabled: false } })),
    ).not.toThrow();
    expect(problems({ ...minimal, rewardWeights: { corect: 1 } })).toEqual([
      expect.stringMatching(/^rewardWeights\.corect: Unrecognized key/),
    ]);
  });

  it('samples the judge at judge.temperature in its GRPO groups and at scoringTemperature when it scores', () => {
    const scoring = parseRunSpec({ ...minimal, judge: { temperature: 0.7, scoringTemperature: 0 } });
    const rm = stageInput(scoring, 'r', 'rewardModel').env;
    const policy = stageInput(scoring, 'r', 'policy').env;
    expect(rm).toMatchObject({ kind: 'rewardModel', judge: { temperature: 0.7 }, scoringTemperature: 0 });
    expect(policy).toMatchObject({ kind: 'policy', judge: { settings: { temperature: 0 } } });
    // Unset, the judge scores as it trains.
    const same = stageInput(parseRunSpec({ ...minimal, judge: { temperature: 0.7 } }), 'r', 'policy').env;
    expect(same).toMatchObject({ judge: { settings: { temperature: 0.7 } } });
  });

  it('fills defaults for everything optional', () => {
    const spec = parseRunSpec(minimal);
    expect(spec.stages.policy).toMatchObject({
      hyperparameters: {
        learning_rate: 1e-5,
        clip_low: 0.2,
        clip_high: 0.28,
        loss_aggregation: 'token-mean',
      },
      dynamicSampling: { enabled: true, minStd: 0.01 },
    });
    expect(spec.stages.policyWarmStart.enabled).toBe(false);
    expect(spec.judge).toMatchObject({ mode: 'skill', reference: 'hidden', maxTokensPerTurn: 192 });
    expect(spec.reward).toBe('reference-free');
    expect(spec.rewardWeights.correct).toBe(1);
    expect(spec.lora).toEqual({ rank: 16, alpha: 32 });
  });

  it('lists every bad field by its path', () => {
    const bad = {
      ...minimal,
      seed: -1,
      models: { policy: { adapter: 'bad name!' }, rewardModel: { adapter: 'rm' } },
      stages: {
        rewardModel: { ...stage, groupSize: 1 },
        policy: { ...stage, hyperparameters: { loss_aggregation: 'sum', learning_rate: 5 } },
      },
      judge: { mode: 'oracle' },
      typo: true,
    };
    const list = problems(bad);
    expect(list).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^seed: /),
        expect.stringMatching(/^models\.policy\.adapter: /),
        expect.stringMatching(/^stages\.rewardModel\.groupSize: GRPO needs/),
        expect.stringMatching(/^stages\.policy\.hyperparameters\.loss_aggregation: /),
        expect.stringMatching(/^stages\.policy\.hyperparameters\.learning_rate: Too big/),
        expect.stringMatching(/^judge\.mode: /),
        expect.stringMatching(/typo/),
      ]),
    );
  });

  it('loads YAML and JSON files, naming the file in errors', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spec-'));
    const yamlFile = path.join(dir, 'run.yaml');
    fs.writeFileSync(
      yamlFile,
      'name: demo\nseed: 1\nmodels:\n  policy: {adapter: policy}\n  rewardModel: {adapter: rm}\nstages:\n  rewardModel: {steps: 1, tasksPerStep: 2, groupSize: 2, hyperparameters: {learning_rate: 0.0001}}\n  policy: {steps: 1, tasksPerStep: 2, groupSize: 2}\n',
    );
    expect(loadRunSpec(yamlFile).name).toBe('demo');
    const jsonFile = path.join(dir, 'run.json');
    fs.writeFileSync(jsonFile, JSON.stringify({ ...minimal, seed: 'x' }));
    expect(() => loadRunSpec(jsonFile)).toThrow(new RegExp(`${jsonFile}: invalid run spec\\n  - seed: `));
    expect(() => loadRunSpec(path.join(dir, 'missing.yaml'))).toThrow(/cannot be read/);
    fs.writeFileSync(yamlFile, 'name: [unclosed');
    expect(() => loadRunSpec(yamlFile)).toThrow(/\(syntax\)/);
  });
});

it('every spec in examples/ is valid', () => {
  const examples = path.resolve(__dirname, '../../examples');
  const files = fs.readdirSync(examples).filter((f) => f.endsWith('.yaml'));
  expect(files.sort()).toEqual(['demo.yaml', 'ladder.yaml', 'production.yaml']);
  for (const f of files) expect(loadRunSpec(path.join(examples, f)).name).toBeTruthy();
});
