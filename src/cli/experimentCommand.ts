import type { Command } from 'commander';
import { loadConfig } from '../config';
import { RunClient } from '../runs/runClient';
import { loadRunSpec } from '../runSpec';
import { print } from './output';

/** `evalrl experiment ladder SPEC`: the seed's table, from two coordinated runs on Temporal. */
export function registerExperimentCommand(program: Command) {
  program
    .command('experiment')
    .description('experiments made of several runs')
    .command('ladder <spec>')
    .description(
      'task success of the base policy, the policy trained with the untrained reward model, and the one trained with the RL-trained reward model',
    )
    .option('--json', 'machine-readable output')
    .action(async (file: string, opts: { json?: boolean }) => {
      const spec = loadRunSpec(file);
      const runs = await RunClient.connect(loadConfig());
      try {
        const result = await runs.ladder(spec, (id) => {
          if (!opts.json)
            console.log(`experiment ${id} started: runs ${id}/untrained-rm and ${id}/trained-rm`);
        });
        print(!!opts.json, result, () => [
          `policy                                      success   ± s.e.   (questions)`,
          ...result.rows.map(
            (r) =>
              `${r.policy.padEnd(43)} ${r.successRate.toFixed(3).padStart(7)}   ${r.standardError.toFixed(3)}   (${r.questions})`,
          ),
        ]);
      } finally {
        await runs.close();
      }
    });
}
