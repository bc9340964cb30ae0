import path from 'node:path';
import cliProgress from 'cli-progress';
import type { Command } from 'commander';
import { loadConfig } from '../config';
import { createPool } from '../db/pool';
import { migrate } from '../db/migrate';
import { ingest } from '../mail/ingest';
import { detectFormat, readMessages, type MailFormat } from '../mail/sources';
import { print } from './output';

const FORMATS: MailFormat[] = ['maildir', 'mbox', 'jsonl'];

interface IngestOptions {
  format?: string;
  inbox?: string;
  batchSize: string;
  json?: boolean;
}

export function registerIngestCommand(program: Command) {
  program
    .command('ingest')
    .description(
      'load mail (Enron maildir, mbox or JSONL) into PostgreSQL; resumable, deduplicated by Message-ID',
    )
    .argument('[path]', 'maildir root, mbox file or JSONL file (default: EVALRL_MAILDIR)')
    .option('--format <format>', `one of ${FORMATS.join(', ')} (default: from the path)`)
    .option('--inbox <id>', 'owner mailbox (required for mbox and JSONL)')
    .option('--batch-size <n>', 'messages per transaction', '2000')
    .option('--json', 'machine-readable report')
    .action(async (target: string | undefined, opts: IngestOptions) => {
      const config = loadConfig();
      const batchSize = Number(opts.batchSize);
      if (!Number.isInteger(batchSize) || batchSize < 1) {
        throw new Error('--batch-size: expected a positive integer');
      }
      const source = path.resolve(target ?? config.maildir);
      if (opts.format && !FORMATS.includes(opts.format as MailFormat)) {
        throw new Error(`--format: unknown format "${opts.format}"; expected one of ${FORMATS.join(', ')}`);
      }
      let format: MailFormat;
      try {
        format = (opts.format as MailFormat | undefined) ?? detectFormat(source);
      } catch {
        throw new Error(`${source}: no such file or folder`);
      }
      const pool = createPool(config, 3); // two batches stored at once, and the ledger read before
      await migrate(pool);
      const bar = new cliProgress.SingleBar(
        {
          format: 'ingest {value} messages | {speed} msg/s | stored {stored} dup {duplicates} bad {rejected}',
        },
        cliProgress.Presets.shades_classic,
      );
      const interactive = !opts.json && process.stderr.isTTY;
      const start = Date.now();
      if (interactive) bar.start(0, 0, { speed: 0, stored: 0, duplicates: 0, rejected: 0 });
      const messages = readMessages(source, format, opts.inbox);
      const report = await ingest(pool, messages, {
        batchSize,
        onProgress: (p) =>
          interactive &&
          bar.update(p.read, { ...p, speed: Math.round(p.read / ((Date.now() - start) / 1000)) }),
      }).finally(() => (interactive ? bar.stop() : undefined));
      await pool.end();
      print(!!opts.json, report, () => [
        `read ${report.read} messages from ${source} (${format}) in ${report.seconds.toFixed(1)}s`,
        `stored ${report.stored}, duplicates ${report.duplicates}, rejected ${report.rejected}, already ingested ${report.alreadyIngested}`,
        ...report.rejects.map((r) => `  rejected ${r.source}: ${r.reason}`),
        ...report.notes.map((n) => `  kept ${n.source}, repaired: ${n.note}`),
      ]);
    });
}
