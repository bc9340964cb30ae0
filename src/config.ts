import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { ConfigError } from './configError';
import { addSecret } from './redact';
import { loadTemporalConfig, temporalEnvShape, type TemporalConfig } from './temporalConnection';
import type { TeacherEndpoint } from './reward/teacherClient';

export { ConfigError };

const port = z.coerce.number().int().min(1).max(65535);
const httpUrl = z.url({ protocol: /^https?$/, error: 'expected an http(s) URL' });
const postgresUrl = z.url({ protocol: /^postgres(ql)?$/, error: 'expected a postgres:// URL' });

/** Every variable evalrl reads, with its default. Secrets (tokens, keys, passwords in URLs) come only from here. */
const envSchema = z.object({
  EVALRL_DATA_DIR: z.string().min(1).default('.evalrl'),
  EVALRL_MAILDIR: z.string().min(1).default('../shared/data/enron/maildir'),
  EVALRL_VENV: z.string().min(1).default('.venv'),
  ...temporalEnvShape,
  EVALRL_TEMPORAL_PORT: port.default(7233),
  EVALRL_TEMPORAL_UI_PORT: port.default(8233),
  DATABASE_URL: postgresUrl.optional(),
  EVALRL_PG_PORT: port.default(5433),
  EVALRL_MODEL_SERVER_URL: httpUrl.default('http://127.0.0.1:8000'),
  EVALRL_MODEL_SERVER_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  /** Where rollouts and judgements sample (vLLM or evalrl model servers), comma-separated; default: the model server. */
  EVALRL_SAMPLING_SERVERS: z
    .string()
    .transform((list) => list.split(',').map((url) => url.trim()))
    .pipe(z.array(httpUrl).min(1))
    .optional(),
  EVALRL_TEACHER_URL: httpUrl.optional(),
  EVALRL_TEACHER_MODEL: z.string().min(1).optional(),
  EVALRL_TEACHER_API_KEY: z.string().min(1).optional(),
  /** Unset: left out of requests, so the model's default applies (the only one reasoning models accept). */
  EVALRL_TEACHER_TEMPERATURE: z.coerce.number().min(0).max(2).optional(),
  EVALRL_TEACHER_MAX_COMPLETION_TOKENS: z.coerce.number().int().min(1).optional(),
  /** Names this machine's GPU task queue; one per host running a model server. */
  EVALRL_GPU_HOST: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,100}$/, 'letters, digits, ., _ and -')
    .optional(),
});

export type Env = z.infer<typeof envSchema>;

export interface Config {
  dataDir: string;
  maildir: string;
  venv: string;
  temporal: TemporalConfig;
  postgres: { external: boolean; url: string; port: number };
  modelServer: { url: string; token?: string };
  /** The sampling pool (EVALRL_SAMPLING_SERVERS); unset: rollouts and judgements sample on the model server. */
  samplingServers?: string[];
  teacher?: TeacherEndpoint;
  gpuHost: string;
}

/** The embedded cluster's roles: the app connects as the database's owner, not a superuser; the superuser (the
 * cluster's bootstrap role) is used only by `up`, for setup. Their passwords: localPostgresSecretsFile. */
const LOCAL_PG_USER = 'evalrl_app';
const LOCAL_PG_SUPERUSER = 'evalrl';
const LOCAL_PG_DATABASE = 'evalrl';

/** The embedded cluster's generated passwords (JSON `{ superuser, app }`), mode 0600, made by `up`. */
export const localPostgresSecretsFile = (dataDir: string) => path.join(dataDir, 'postgres-secrets.json');

export interface LocalPostgresSecrets {
  superuser: string;
  app: string;
}

/** The embedded cluster's passwords, where `up` made them (undefined before the first `up`); redacted from now on. */
export function readLocalPostgresSecrets(dataDir: string): LocalPostgresSecrets | undefined {
  let secrets: LocalPostgresSecrets;
  try {
    secrets = JSON.parse(fs.readFileSync(localPostgresSecretsFile(dataDir), 'utf8')) as LocalPostgresSecrets;
  } catch {
    return undefined;
  }
  if (typeof secrets.superuser !== 'string' || typeof secrets.app !== 'string') return undefined;
  addSecret(secrets.superuser);
  addSecret(secrets.app);
  return secrets;
}

/** The embedded cluster's URL for a role (the app's by default), with its password where there is one. */
export function localPostgresUrl(
  port: number,
  password?: string,
  role: 'app' | 'superuser' = 'app',
  database = LOCAL_PG_DATABASE,
): string {
  const user = role === 'app' ? LOCAL_PG_USER : LOCAL_PG_SUPERUSER;
  const auth = password ? `${user}:${encodeURIComponent(password)}` : user;
  return `postgres://${auth}@127.0.0.1:${port}/${database}`;
}

/** Reads and validates the environment; throws ConfigError naming the first bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const present = Object.fromEntries(
    Object.entries(env).filter(
      (entry): entry is [string, string] => entry[1] !== undefined && entry[1] !== '',
    ),
  );
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ConfigError(String(issue.path[0]), issue.message);
  }
  const e = parsed.data;
  if (e.EVALRL_TEACHER_URL && !e.EVALRL_TEACHER_MODEL) {
    throw new ConfigError('EVALRL_TEACHER_MODEL', 'required when EVALRL_TEACHER_URL is set');
  }
  const dataDir = path.resolve(e.EVALRL_DATA_DIR);
  return {
    dataDir,
    maildir: path.resolve(e.EVALRL_MAILDIR),
    venv: path.resolve(e.EVALRL_VENV),
    temporal: loadTemporalConfig(present, {
      port: e.EVALRL_TEMPORAL_PORT,
      uiPort: e.EVALRL_TEMPORAL_UI_PORT,
    }),
    postgres: {
      external: e.DATABASE_URL !== undefined,
      url: e.DATABASE_URL ?? localPostgresUrl(e.EVALRL_PG_PORT, readLocalPostgresSecrets(dataDir)?.app),
      port: e.EVALRL_PG_PORT,
    },
    modelServer: { url: e.EVALRL_MODEL_SERVER_URL, token: e.EVALRL_MODEL_SERVER_TOKEN },
    samplingServers: e.EVALRL_SAMPLING_SERVERS,
    teacher: e.EVALRL_TEACHER_URL
      ? {
          url: e.EVALRL_TEACHER_URL,
          model: e.EVALRL_TEACHER_MODEL!,
          apiKey: e.EVALRL_TEACHER_API_KEY,
          temperature: e.EVALRL_TEACHER_TEMPERATURE,
          maxCompletionTokens: e.EVALRL_TEACHER_MAX_COMPLETION_TOKENS,
        }
      : undefined,
    gpuHost: e.EVALRL_GPU_HOST ?? os.hostname().replace(/[^A-Za-z0-9._-]/g, '-'),
  };
}

export const localPostgres = {
  user: LOCAL_PG_USER,
  superuser: LOCAL_PG_SUPERUSER,
  database: LOCAL_PG_DATABASE,
};
