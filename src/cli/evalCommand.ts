import path from 'node:path';
import type { Command } from 'commander';
import { loadConfig } from '../config';
import { stageInput } from '../grpo/stage';
import { repoRoot } from '../paths';
import { RunClient } from '../runs/runClient';
import { loadRunSpec, type RunSpec } from '../runSpec';
import { print } from './output';

/** `evalrl eval ADAPTER`: a policy adapter on held-out questions, or a reward-model adapter on a run's labelled episodes. */
export function registerEvalCommand(program: Command) {
  program
    .command('eval <adapter>')
    .description('evaluate an adapter (or `base`) on a split: a policy by default, a reward model with --run')
    .option(
      '--spec <file>',
      'run spec whose sampling, judge and reward settings to use',
      path.join(repoRoot(), 'examples', 'demo.yaml'),
    )
    .option('--split <split>', 'train or test', 'test')
    .option('--questions <n>', 'questions (policy) or labelled episodes (reward model)', '20')
    .option('--run <runId>', "evaluate as a reward model, on this run's held-out labelled episodes")
    .option('--json', 'machine-readable output')
    .action(
      async (
        adapter: string,
        opts: { spec: string; split: string; questions: string; run?: string; json?: boolean },
      ) => {
        if (opts.split !== 'train' && opts.split !== 'test')
          throw new Error('--split: expected train or test');
        const count = Number(opts.questions);
        if (!Number.isInteger(count) || count < 1)
          throw new Error('--questions: expected a positive integer');
        const spec: RunSpec = loadRunSpec(opts.spec);
        const runs = await RunClient.connect(loadConfig());
        try {
          const kind = opts.run ? 'rewardModel' : 'policy';
          const runId = opts.run ?? `eval-${adapter}`;
          if (opts.run) await runs.status(opts.run); // an unknown run is refused here, by name
          const result = await runs.evaluate({
            runId,
            label: `eval:${kind}:${adapter}:${opts.split}:${Date.now()}`,
            kind,
            model: adapter,
            split: opts.split,
            count,
            seed: spec.seed,
            env: stageInput(spec, runId, kind).env,
          });
          print(!!opts.json, result, () => [
            `${kind} ${adapter} on ${opts.split}:`,
            ...Object.entries(result.metrics).map(
              ([k, v]) => `  ${k.padEnd(12)} ${Number.isInteger(v) ? v : v.toFixed(3)}`,
            ),
          ]);
        } finally {
          await runs.close();
        }
      },
    );
}
