import type { Command } from 'commander';
import { loadConfig } from '../config';
import { down, status, up } from '../stack/stack';
import { temporalUiUrl } from '../stack/temporal';
import { print } from './output';

export function registerStackCommands(program: Command) {
  program
    .command('up')
    .description('start the local stack (Temporal dev server, PostgreSQL) and apply migrations')
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean }) => {
      const config = loadConfig();
      const result = await up(config);
      print(!!opts.json, { ...result, temporalUi: temporalUiUrl(config) }, () => [
        `Temporal   ${result.temporal} at ${config.temporal.address} (namespace ${config.temporal.namespace})`,
        `Temporal UI ${temporalUiUrl(config) ?? '(external server)'}`,
        `PostgreSQL ${result.postgres}`,
        `migrations ${result.migrationsApplied.length ? result.migrationsApplied.join(', ') : 'up to date'}`,
        `data and logs under ${config.dataDir}`,
      ]);
    });

  program
    .command('down')
    .description('stop the services evalrl started (never others)')
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean }) => {
      const result = await down(loadConfig());
      print(!!opts.json, result, () => [
        `Temporal     ${result.temporal}`,
        `PostgreSQL   ${result.postgres}`,
        `model server ${result.modelServer}`,
      ]);
    });

  program
    .command('status')
    .description('health of the stack')
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean }) => {
      const s = await status(loadConfig());
      const health = (ok: boolean) => (ok ? 'healthy' : 'DOWN (run `evalrl up`)');
      print(!!opts.json, s, () => [
        `Temporal   ${health(s.temporal.healthy)} at ${s.temporal.address} (namespace ${s.temporal.namespace})`,
        ...(s.temporal.ui ? [`Temporal UI ${s.temporal.ui}`] : []),
        `PostgreSQL ${health(s.postgres.healthy)}`,
      ]);
      if (!s.temporal.healthy || !s.postgres.healthy) process.exitCode = 1;
    });
}
