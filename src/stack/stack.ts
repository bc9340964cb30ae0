import type { Config } from '../config';
import { createPool } from '../db/pool';
import { migrate } from '../db/migrate';
import { stopModelServer } from './modelServer';
import { postgresHealthy, postgresProcess, startPostgres, stopPostgres } from './postgres';
import { runningPid } from './processes';
import { startTemporal, stopTemporal, temporalHealthy, temporalProcess, temporalUiUrl } from './temporal';

export interface StackStatus {
  temporal: {
    address: string;
    namespace: string;
    healthy: boolean;
    managed: boolean;
    ui?: string;
    log?: string;
  };
  postgres: { healthy: boolean; managed: boolean; log?: string };
}

/** Brings up Temporal and PostgreSQL (reusing what already runs) and applies pending migrations. */
export async function up(config: Config) {
  const [temporal, postgres] = await Promise.all([startTemporal(config), startPostgres(config)]);
  const pool = createPool(config, 1);
  try {
    const applied = await migrate(pool);
    return { temporal, postgres, migrationsApplied: applied.map((m) => `${m.version}_${m.name}`) };
  } finally {
    await pool.end();
  }
}

/** Stops only what evalrl started (services with a pid file under the data directory), the model server too. */
export async function down(config: Config) {
  const [temporal, postgres, modelServer] = await Promise.all([
    stopTemporal(config),
    stopPostgres(config),
    stopModelServer(config),
  ]);
  const said = (stopped: boolean) => (stopped ? 'stopped' : 'not running');
  return { temporal: said(temporal), postgres: said(postgres), modelServer: said(modelServer) };
}

export async function status(config: Config): Promise<StackStatus> {
  const [temporalOk, postgresOk] = await Promise.all([
    temporalHealthy(config).catch(() => false),
    postgresHealthy(config).catch(() => false),
  ]);
  const temporalManaged = runningPid(temporalProcess(config)) !== undefined;
  const postgresManaged = runningPid(postgresProcess(config)) !== undefined;
  return {
    temporal: {
      address: config.temporal.address,
      namespace: config.temporal.namespace,
      healthy: temporalOk,
      managed: temporalManaged,
      ui: temporalUiUrl(config),
      log: temporalManaged ? temporalProcess(config).logFile : undefined,
    },
    postgres: {
      healthy: postgresOk,
      managed: postgresManaged,
      log: postgresManaged ? postgresProcess(config).logFile : undefined,
    },
  };
}
