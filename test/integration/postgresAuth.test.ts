import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { loadConfig, localPostgresSecretsFile, localPostgresUrl, type Config } from '../../src/config';
import { migrate } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { redact } from '../../src/redact';
import { clusterDir } from '../../src/stack/postgres';
import { tempDataDir } from './testStack';

const root = path.resolve(__dirname, '../..');

/** `up`'s PostgreSQL part (or `down`'s), by the built code in a process of its own (jest cannot load the
 * server binaries' ES module); says what it did. */
function postgres(what: 'startPostgres' | 'stopPostgres', config: Config): string {
  const script = `const { loadConfig } = require(${JSON.stringify(path.join(root, 'dist/src/config.js'))});
    const stack = require(${JSON.stringify(path.join(root, 'dist/src/stack/postgres.js'))});
    stack.${what}(loadConfig({ EVALRL_DATA_DIR: ${JSON.stringify(config.dataDir)}, EVALRL_PG_PORT: '${config.postgres.port}' }))
      .then((r) => console.log(String(r)), (e) => { console.error(e); process.exit(1); });`;
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.DATABASE_URL;
  return execFileSync(process.execPath, ['-e', script], { env, cwd: root }).toString().trim();
}
const startPostgres = async (config: Config) => {
  const said = postgres('startPostgres', config);
  Object.assign(config, { postgres: configOf(config.dataDir, String(config.postgres.port)).postgres });
  return said;
};
const stopPostgres = async (config: Config) => postgres('stopPostgres', config);

jest.setTimeout(180_000);

// Issue 47: the embedded cluster has passwords (scram-sha-256), and evalrl connects as a non-superuser role.
const configOf = (dir: string, port: string): Config =>
  loadConfig({ EVALRL_DATA_DIR: dir, EVALRL_PG_PORT: port, DATABASE_URL: undefined });

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

/** What the superuser still owns in the evalrl database (an older cluster owned it all). */
const OWNED_BY_SUPERUSER = `
  SELECT coalesce(string_agg(what, ', ' ORDER BY what), '') AS owned, count(*) AS n FROM (
    SELECT c.relkind::text || ' ' || c.relname AS what FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relowner = 'evalrl'::regrole
    UNION ALL
    SELECT 'function ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'public' AND p.proowner = 'evalrl'::regrole
       AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
    UNION ALL
    SELECT 'dictionary ' || dictname FROM pg_ts_dict WHERE dictowner = 'evalrl'::regrole AND dictname LIKE 'evalrl%'
    UNION ALL
    SELECT 'configuration ' || cfgname FROM pg_ts_config WHERE cfgowner = 'evalrl'::regrole AND cfgname LIKE 'evalrl%'
  ) o`;

async function expectLocked(config: Config) {
  const port = config.postgres.port;
  for (const role of ['superuser', 'app'] as const)
    await expect(query(localPostgresUrl(port, undefined, role), 'SELECT 1')).rejects.toThrow(/password/);
  await expect(query(localPostgresUrl(port, 'wrong-password', 'superuser'), 'SELECT 1')).rejects.toThrow(
    /password authentication failed/,
  );
  const hba = fs.readFileSync(path.join(clusterDir(config), 'pg_hba.conf'), 'utf8');
  expect(hba.split('\n').filter((l) => !l.startsWith('#') && /\btrust\b/.test(l))).toEqual([]);
}

describe('the embedded PostgreSQL', () => {
  const dirs: Config[] = [];
  afterAll(async () => {
    for (const config of dirs) {
      await stopPostgres(config).catch(() => undefined);
      fs.rmSync(config.dataDir, { recursive: true, force: true });
    }
  });

  it('has passwords (a 0600 file), and evalrl connects as the owner of its database, no superuser', async () => {
    const config = configOf(tempDataDir('evalrl-pg-auth-'), '35433');
    dirs.push(config);
    await expect(startPostgres(config)).resolves.toBe('started');
    const file = localPostgresSecretsFile(config.dataDir);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    const { app } = JSON.parse(fs.readFileSync(file, 'utf8')) as { app: string };
    // A later command reads it; its URL carries the password, which redaction takes out.
    const later = configOf(config.dataDir, '35433');
    expect(later.postgres.url).toBe(config.postgres.url);
    expect(later.postgres.url).toContain(app);
    expect(redact(`${later.postgres.url} refused; password ${app}`)).not.toContain(app);

    const [me] = await query<{ user: string; superuser: boolean; owner: string }>(
      later.postgres.url,
      `SELECT current_user AS user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser,
              pg_get_userbyid(datdba) AS owner FROM pg_database WHERE datname = current_database()`,
    );
    expect(me).toEqual({ user: 'evalrl_app', superuser: false, owner: 'evalrl_app' });
    const pool = createPool(later, 1);
    try {
      await migrate(pool); // the migrations need no superuser (btree_gin is a trusted extension)
    } finally {
      await pool.end();
    }
    await expectLocked(later);
  });

  it("of an older evalrl (trust auth, the superuser's tables) is migrated by `up` and keeps its data", async () => {
    const config = configOf(tempDataDir('evalrl-pg-old-'), '35434');
    dirs.push(config);
    await startPostgres(config);
    // Make it what an older evalrl made: trust auth, no app role, the superuser owning the database and the
    // migrations' tables, functions and text search objects; no passwords file.
    const secrets = JSON.parse(fs.readFileSync(localPostgresSecretsFile(config.dataDir), 'utf8'));
    const su = (db = 'postgres') =>
      localPostgresUrl(config.postgres.port, secrets.superuser, 'superuser', db);
    await query(su(), 'ALTER DATABASE evalrl OWNER TO evalrl');
    await query(su(), 'DROP ROLE evalrl_app');
    const hba = path.join(clusterDir(config), 'pg_hba.conf');
    fs.writeFileSync(hba, fs.readFileSync(hba, 'utf8').replace(/scram-sha-256\s*$/gm, 'trust'));
    await query(su(), 'SELECT pg_reload_conf()');
    await query(su(), 'ALTER ROLE evalrl PASSWORD NULL');
    fs.rmSync(localPostgresSecretsFile(config.dataDir));
    const old = configOf(config.dataDir, '35434');
    expect(old.postgres.url).toBe('postgres://evalrl_app@127.0.0.1:35434/evalrl');
    const oldUrl = localPostgresUrl(35434, undefined, 'superuser');
    const pool = new pg.Pool({ connectionString: oldUrl, max: 1 });
    try {
      await migrate(pool);
      await pool.query(`INSERT INTO schema_migrations (version, name) VALUES (9999, 'kept')`);
    } finally {
      await pool.end();
    }
    expect(Number((await query<{ n: string }>(oldUrl, OWNED_BY_SUPERUSER))[0].n)).toBeGreaterThan(5);

    // `up` again, by this version: the running server is reused and migrated.
    const upgraded = configOf(config.dataDir, '35434');
    await expect(startPostgres(upgraded)).resolves.toBe('reused');
    expect(upgraded.postgres.url).not.toBe(old.postgres.url);
    await expectLocked(upgraded);
    const fresh = configOf(config.dataDir, '35434');
    expect(fresh.postgres.url).toBe(upgraded.postgres.url);
    const newSecrets = JSON.parse(fs.readFileSync(localPostgresSecretsFile(config.dataDir), 'utf8'));
    const owned = await query<{ owned: string }>(
      localPostgresUrl(35434, newSecrets.superuser, 'superuser'),
      OWNED_BY_SUPERUSER,
    );
    expect(owned[0].owned).toBe('');
    const pool2 = createPool(fresh, 1);
    try {
      await expect(migrate(pool2)).resolves.toEqual([]);
      const kept = await pool2.query(`SELECT name FROM schema_migrations WHERE version = 9999`);
      expect(kept.rows).toEqual([{ name: 'kept' }]);
      await pool2.query(`DELETE FROM schema_migrations WHERE version = 9999`); // the app's role owns it
    } finally {
      await pool2.end();
    }
    // And it keeps working across a restart.
    await stopPostgres(fresh);
    await expect(startPostgres(configOf(config.dataDir, '35434'))).resolves.toBe('started');
    await expectLocked(fresh);
  });
});
