/**
 * Temporal's standard client configuration, read as every Temporal SDK and the CLI read it: a profile of
 * the TOML file (TEMPORAL_CONFIG_FILE, else ~/.config/temporalio/temporal.toml; TEMPORAL_PROFILE, else
 * `default`) overridden by TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS and
 * TEMPORAL_TLS_* (CA, client certificate and key, server name) and TEMPORAL_GRPC_META_* headers.
 */
import fs from 'node:fs';
import type { Metadata, TLSConfig } from '@temporalio/client';
import {
  loadClientConfigProfile,
  toClientOptions,
  type ClientConfigProfile,
  type ClientConfigTLS,
} from '@temporalio/envconfig';
import { z } from 'zod';
import { ConfigError } from './configError';

const DEFAULT_NAMESPACE = 'evalrl';

/** Checked by evalrl itself: the SDK's loader reads any flag value but `true`/`1` as off, silently. */
export const temporalEnvShape = {
  TEMPORAL_ADDRESS: z
    .string()
    .regex(/^[^:\s/]+:\d{1,5}$/, 'expected host:port, e.g. 127.0.0.1:7233')
    .optional(),
  TEMPORAL_NAMESPACE: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$/, 'not a valid namespace name')
    .optional(),
  TEMPORAL_TLS: z.enum(['true', 'false', '1', '0'], { error: 'expected true or false' }).optional(),
  // The TypeScript SDK cannot skip the host name check; naming the certificate's host is what it offers.
  TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: z
    .enum(['false', '0'], {
      error:
        'not supported by the TypeScript SDK: set TEMPORAL_TLS_SERVER_NAME to a name in the server certificate',
    })
    .optional(),
};

/** What a connection needs beyond the address; empty for the local dev server. Holds secrets: never print. */
export interface TemporalAccess {
  tls?: TLSConfig | boolean | null;
  apiKey?: string;
  metadata?: Metadata;
}

export interface TemporalConfig {
  /** Set when TEMPORAL_ADDRESS or the profile names a server; otherwise the local dev server is used. */
  external: boolean;
  address: string;
  namespace: string;
  /** Ports of the local dev server. */
  port: number;
  uiPort: number;
  access: TemporalAccess;
}

/** Options that `Connection.connect` (client) and `NativeConnection.connect` (worker) both take. */
export type TemporalConnectionOptions = TemporalAccess & { address: string };

export function temporalConnectionOptions(temporal: TemporalConfig): TemporalConnectionOptions {
  return { address: temporal.address, ...temporal.access };
}

/** Reads the standard configuration from `env` (empty values already dropped); throws ConfigError. */
export function loadTemporalConfig(
  env: Record<string, string>,
  local: { port: number; uiPort: number },
): TemporalConfig {
  const profile = loadProfile(env);
  checkTlsFiles(profile.tls, env);
  const { namespace, connectionOptions } = toClientOptions(profile);
  const { address, tls, apiKey, metadata } = connectionOptions;
  return {
    external: address !== undefined,
    address: address ?? `127.0.0.1:${local.port}`,
    namespace: namespace ?? DEFAULT_NAMESPACE,
    ...local,
    // Settings meant for a remote server (an API key, a CA) would only break the plaintext dev server.
    access: address === undefined ? {} : { tls, apiKey, metadata },
  };
}

function loadProfile(env: Record<string, string>): ClientConfigProfile {
  if (env.TEMPORAL_CONFIG_FILE !== undefined) requireFile('TEMPORAL_CONFIG_FILE', env.TEMPORAL_CONFIG_FILE);
  try {
    return loadClientConfigProfile({ overrideEnvVars: env });
  } catch (err) {
    throw profileError(err as Error & { line?: number }, env);
  }
}

/** Names the variable to fix. TOML errors quote the file's lines, which may hold a key: only the first line is kept. */
function profileError(err: Error & { line?: number }, env: Record<string, string>): ConfigError {
  const message = err.message.split('\n')[0];
  if (message.startsWith('Profile ')) return new ConfigError('TEMPORAL_PROFILE', message);
  if (err.line === undefined) return new ConfigError('Temporal configuration', message);
  const file = env.TEMPORAL_CONFIG_FILE ?? '~/.config/temporalio/temporal.toml';
  return new ConfigError('TEMPORAL_CONFIG_FILE', `${file}: ${message} (line ${err.line})`);
}

/** The TLS files, with the variable (or config-file key) that names each. */
const TLS_FILES = [
  { field: 'serverCACert', variable: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH', key: 'tls.server_ca_cert_path' },
  { field: 'clientCert', variable: 'TEMPORAL_TLS_CLIENT_CERT_PATH', key: 'tls.client_cert_path' },
  { field: 'clientKey', variable: 'TEMPORAL_TLS_CLIENT_KEY_PATH', key: 'tls.client_key_path' },
] as const;

/** Fails here, naming the setting, rather than inside the SDK's file read or with a certificate silently dropped. */
function checkTlsFiles(tls: ClientConfigTLS | undefined, env: Record<string, string>) {
  const [, cert, key] = TLS_FILES;
  for (const file of TLS_FILES) {
    const source = tls?.[file.field];
    if (source && 'path' in source) requireFile(env[file.variable] ? file.variable : file.key, source.path);
  }
  if (tls?.clientCert && !tls.clientKey)
    throw new ConfigError(key.variable, `required with ${cert.variable}`);
  if (tls?.clientKey && !tls.clientCert)
    throw new ConfigError(cert.variable, `required with ${key.variable}`);
}

function requireFile(variable: string, file: string) {
  if (!isReadableFile(file)) throw new ConfigError(variable, `cannot read ${file}`);
}

function isReadableFile(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.R_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}
