import fs from 'node:fs';
import type { Command } from 'commander';
import { loadConfig } from '../config';
import { RunClient } from '../runs/runClient';
import { loadRunSpec } from '../runSpec';
import type { LadderResult } from '../workflows/experimentLadder';
import { print } from './output';

const ROWS: [keyof LadderResult['rows'], string][] = [
  ['base', 'raw base policy'],
  ['warm_start', 'warm start'],
  ['rl_untrained_rm', 'GRPO with the untrained reward model'],
  ['rl_trained_rm', 'GRPO with the GRPO-trained reward model'],
];

const pct = (x: number | null | undefined) => (x == null ? '   –  ' : x.toFixed(3));

/** The ladder's table: each row as success ± standard error with n; the reward model's agreement before and after. */
export function ladderTable(r: LadderResult): string[] {
  const a = r.rm_agreement;
  return [
    `policy (held-out questions)                  success ± s.e.      n`,
    ...ROWS.map(([key, name]) => {
      const row = r.rows[key];
      return `${name.padEnd(44)} ${pct(row?.success)} ± ${pct(row?.se)}  ${row?.n ?? '–'}`;
    }),
    `reward model agreement (held-out, balanced): untrained ${pct(a.untrained)} ± ${pct(a.untrained_se)}, trained ${pct(a.trained)} ± ${pct(a.trained_se)}  (n ${a.n ?? '–'})`,
    ...judgesLines(r.judges),
  ];
}

/** Whether the reward model's stage changed a score the policy saw: if not, the two GRPO rows are one row. */
function judgesLines(j: LadderResult['judges']): string[] {
  if (!j || j.episodes === 0) return [];
  const line = `judges on the ${j.episodes} policy episodes both runs sampled alike: ${j.differing} scored differently`;
  if (j.differing > 0) return [line];
  return [
    line,
    '! the trained reward model scored every one as the untrained one did: on them the policy learned the same ' +
      'from both judges, and the two GRPO rows cannot tell the judges apart; try more reward-model steps or tasks per step',
  ];
}

/** `evalrl experiment ladder SPEC`: the seed's table, from two coordinated runs on Temporal. */
export function registerExperimentCommand(program: Command) {
  program
    .command('experiment')
    .description('experiments made of several runs')
    .command('ladder <spec>')
    .description(
      'base, warm start, GRPO with the untrained and with the trained reward model, on the same held-out questions',
    )
    .option('--out <file>', 'also write the result as JSON (with its wall time)')
    .option('--json', 'machine-readable output')
    .action(async (file: string, opts: { out?: string; json?: boolean }) => {
      const spec = loadRunSpec(file);
      const runs = await RunClient.connect(loadConfig());
      try {
        const started = Date.now();
        const ladder = await runs.startLadder(spec);
        if (!opts.json)
          console.log(
            `experiment ${ladder.experimentId}: runs ${ladder.runs.trained}, then ${ladder.runs.untrained}`,
          );
        const result = await ladder.result();
        const out = { ...result, wall_seconds: Math.round((Date.now() - started) / 1000) };
        if (opts.out) fs.writeFileSync(opts.out, `${JSON.stringify(out, null, 2)}\n`);
        print(!!opts.json, out, () => [...ladderTable(result), `wall time ${out.wall_seconds} s`]);
      } finally {
        await runs.close();
      }
    });
}
