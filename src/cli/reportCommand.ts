import path from 'node:path';
import type { Command } from 'commander';
import { loadConfig } from '../config';
import { createPool } from '../db/pool';
import { writeReport } from '../report/writeReport';
import { print } from './output';

export function registerReportCommand(program: Command) {
  program
    .command('report <runId>')
    .description('write a self-contained HTML report of a run, with PNG charts beside it')
    .option('--out <dir>', 'output folder (default: EVALRL_DATA_DIR/reports/RUN_ID)')
    .option('--json', 'machine-readable output')
    .action(async (runId: string, opts: { out?: string; json?: boolean }) => {
      const config = loadConfig();
      const pool = createPool(config, 2);
      try {
        const dir = opts.out ?? path.join(config.dataDir, 'reports', runId.replace(/[^A-Za-z0-9._-]/g, '_'));
        const written = await writeReport(pool, runId, dir);
        print(!!opts.json, written, () => [
          `report: ${written.html}`,
          `charts: ${path.dirname(written.pngs[0])}/`,
        ]);
      } finally {
        await pool.end();
      }
    });
}
