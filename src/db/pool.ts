import pg from 'pg';
import type { Config } from '../config';

/**
 * One pool per process; activities share it. An idle connection that PostgreSQL drops (a restart) is
 * reported, not fatal: the pool opens a new one for the next query.
 */
export function createPool(config: Config, max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString: config.postgres.url, max });
  pool.on('error', (err) => console.error(`evalrl: PostgreSQL dropped an idle connection: ${err.message}`));
  return pool;
}

/** Runs `work` in a transaction: committed if it returns, rolled back if it throws. */
export async function inTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}
