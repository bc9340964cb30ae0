import type { Command } from 'commander';
import { loadConfig } from '../config';
import { createPool } from '../db/pool';
import { createStore } from '../store';
import { migrate } from '../db/migrate';
import { DEFAULT_MIN_REALISM, generateQuestions } from '../mail/generateQuestions';
import { print } from './output';

export function registerQuestionsCommand(program: Command) {
  const questions = program.command('questions').description('question–answer pairs over the ingested mail');
  questions
    .command('generate')
    .description(
      'derive questions from the mail (templates; plus the LLM generator when a teacher is configured)',
    )
    .option('--seed <seed>', 'seed of the train/test split of inboxes', '0')
    .option('--test-fraction <x>', 'share of inboxes held out for test', '0.3')
    .option(
      '--min-realism <x>',
      "LLM questions only: the teacher's least how_realistic score kept (0–1)",
      String(DEFAULT_MIN_REALISM),
    )
    .option('--json', 'machine-readable report')
    .action(async (opts: { seed: string; testFraction: string; minRealism: string; json?: boolean }) => {
      const testFraction = Number(opts.testFraction);
      if (!(testFraction >= 0 && testFraction < 1))
        throw new Error('--test-fraction: expected a number in [0, 1)');
      const minRealism = Number(opts.minRealism);
      if (!(minRealism >= 0 && minRealism <= 1))
        throw new Error('--min-realism: expected a number in [0, 1]');
      const config = loadConfig();
      const pool = createPool(config, 2);
      await migrate(pool);
      const report = await generateQuestions(createStore(pool), {
        seed: opts.seed,
        testFraction,
        teacher: config.teacher,
        minRealism,
      });
      await pool.end();
      print(!!opts.json, report, () => [
        `generated ${report.generated} questions (${report.inserted} new)${config.teacher ? `, teacher ${config.teacher.model} (${report.unrealistic} rated below ${minRealism} realism left out, ${report.dropped} dropped: malformed, citing unknown emails or stating their answer)` : ', templates only (no teacher configured)'}`,
        ...Object.entries(report.perInbox).map(
          ([inbox, n]) => `  ${inbox.padEnd(12)} ${String(n).padStart(5)}  ${report.splits[inbox]}`,
        ),
      ]);
    });
}
