import type { Command } from 'commander';
import { loadConfig } from '../config';
import { createPool } from '../db/pool';
import { createWorkers, WORKER_QUEUES as QUEUES, type WorkerQueue } from '../workers/start';

export function registerWorkerCommand(program: Command) {
  program
    .command('worker')
    .description(`run workers for the given task queues (default: all of ${QUEUES.join(', ')})`)
    .option('--queues <names>', 'comma-separated queue names', QUEUES.join(','))
    .action(async (opts: { queues: string }) => {
      const queues = opts.queues.split(',').map((q) => q.trim());
      const unknown = queues.filter((q) => !(QUEUES as readonly string[]).includes(q));
      if (unknown.length)
        throw new Error(`--queues: unknown queue ${unknown.join(', ')}; known: ${QUEUES.join(', ')}`);
      const config = loadConfig();
      const pool = createPool(config);
      const workers = await createWorkers(config, pool, queues as WorkerQueue[]);
      console.log(`evalrl worker: serving ${queues.join(', ')} on ${config.temporal.address}`);
      await Promise.all(workers.map((w) => w.run()));
      await pool.end();
    });
}
