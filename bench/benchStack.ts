import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig, type Config } from '../src/config';
import type { Db } from '../src/store/db';
import { migrate } from '../src/db/migrate';
import { createPool } from '../src/db/pool';
import { generateQuestions } from '../src/mail/generateQuestions';
import { ingest } from '../src/mail/ingest';
import { readMaildir } from '../src/mail/sources';
import { createStore } from '../src/store';
import { startModelServer, stopModelServer, type ModelServerSettings } from '../src/stack/modelServer';
import { startPostgres, stopPostgres } from '../src/stack/postgres';
import { startTemporal, stopTemporal } from '../src/stack/temporal';

/**
 * A throwaway stack for one benchmark, on its own ports under a temp folder: PostgreSQL (and Temporal when
 * asked) with the Enron mail ingested and questions derived, and the SmolLM2 model server on the CPU.
 */
export async function startBenchStack(
  name: string,
  env: Record<string, string>,
  options: { temporal: boolean; modelServer: Omit<ModelServerSettings, 'checkpoints'>; poolSize?: number },
) {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), `evalrl-bench-${name}-`));
  fs.chmodSync(work, 0o755);
  const config: Config = loadConfig({
    ...process.env,
    ...env,
    EVALRL_DATA_DIR: work,
    DATABASE_URL: undefined,
    TEMPORAL_ADDRESS: undefined,
  });
  await startPostgres(config);
  if (options.temporal) await startTemporal(config);
  const pool = createPool(config, options.poolSize ?? 40);
  await migrate(pool);
  await ingest(pool, readMaildir(config.maildir));
  await generateQuestions(createStore(pool), { seed: '0', testFraction: 0.3 });
  await startModelServer(config, { ...options.modelServer, checkpoints: path.join(work, 'checkpoints') });
  return {
    config,
    pool,
    env: { ...env, EVALRL_DATA_DIR: work },
    async stop() {
      await stopModelServer(config);
      await pool.end();
      if (options.temporal) await stopTemporal(config);
      await stopPostgres(config);
      fs.rmSync(work, { recursive: true, force: true });
    },
  };
}

/** A throwaway PostgreSQL (migrated) for one benchmark, on its own port under a temp folder, removed after `run`. */
export async function withBenchPostgres<T>(
  name: string,
  port: string,
  run: (pool: Db, work: string) => Promise<T>,
): Promise<T> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), `evalrl-bench-${name}-`));
  fs.chmodSync(work, 0o755);
  const config = loadConfig({
    ...process.env,
    EVALRL_DATA_DIR: path.join(work, 'data'),
    EVALRL_PG_PORT: port,
    DATABASE_URL: undefined,
  });
  await startPostgres(config);
  const pool = createPool(config, 4);
  try {
    await migrate(pool);
    return await run(pool, work);
  } finally {
    await pool.end();
    await stopPostgres(config);
    fs.rmSync(work, { recursive: true, force: true });
  }
}
