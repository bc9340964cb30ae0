import type pg from 'pg';
import { inTransaction } from './pool';
import { MIGRATIONS, type Migration } from './migrations';

/**
 * Applies the migrations not yet recorded in schema_migrations, all in one transaction; an advisory
 * lock keeps two processes starting at once from racing. Re-running is a no-op.
 */
export async function migrate(pool: pg.Pool, migrations: Migration[] = MIGRATIONS): Promise<Migration[]> {
  return inTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock(7142001)');
    await client.query(`
      CREATE TABLE IF NOT EXISTS schema_migrations (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((row) => row.version));
    const pending = migrations.filter((m) => !applied.has(m.version)).sort((a, b) => a.version - b.version);
    for (const migration of pending) {
      await client.query(migration.sql);
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
        migration.version,
        migration.name,
      ]);
    }
    return pending;
  });
}
