import fs from 'node:fs';
import os from 'node:os';
import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import { loadConfig, type Config } from '../../src/config';
import { startModelServer, type ModelServerSettings } from '../../src/stack/modelServer';

const run = promisify(execFile);
const root = path.resolve(__dirname, '../..');

/** The shared stack integration tests run against: its own data folder and ports, apart from the demo's. */
export const TEST_STACK_ENV = {
  // Under the temp dir, which the unprivileged PostgreSQL user can enter wherever the clone lives.
  EVALRL_DATA_DIR: path.join(
    os.tmpdir(),
    `evalrl-test-stack-${createHash('sha256').update(root).digest('hex').slice(0, 8)}`,
  ),
  EVALRL_TEMPORAL_PORT: '17233',
  EVALRL_TEMPORAL_UI_PORT: '18233',
  EVALRL_PG_PORT: '15433',
  EVALRL_VENV: path.join(root, '.venv'),
  EVALRL_MAILDIR: path.resolve(root, '../shared/data/enron/maildir'),
};

export function stackConfig(env: Record<string, string> = TEST_STACK_ENV): Config {
  const config = loadConfig({ ...env, TEMPORAL_ADDRESS: undefined, DATABASE_URL: undefined });
  // Another data folder on the shared PostgreSQL: its password is under the shared data folder.
  if (
    env.EVALRL_PG_PORT === TEST_STACK_ENV.EVALRL_PG_PORT &&
    env.EVALRL_DATA_DIR !== TEST_STACK_ENV.EVALRL_DATA_DIR
  )
    config.postgres.url = loadConfig({ ...TEST_STACK_ENV }).postgres.url;
  return config;
}

/** Runs the built evalrl CLI (as a user would) with the given environment. */
export async function cli(args: string[], env: Record<string, string> = TEST_STACK_ENV) {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  delete childEnv.TEMPORAL_ADDRESS;
  delete childEnv.DATABASE_URL;
  return run('node', [path.join(root, 'dist/src/cli/main.js'), ...args], { env: childEnv, cwd: root });
}

/** A fresh data folder under the system temp dir that the unprivileged PostgreSQL user can enter. */
export function tempDataDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  fs.chmodSync(dir, 0o755);
  return dir;
}

/**
 * Starts a real model server on a tiny random model of SmolLM2's shape (built on the fly, once per folder),
 * deterministic mode. Started again on the same folder, it resumes its adapters from their checkpoints.
 */
export async function startTinyModelServer(dir: string, port: number, options: { initRange?: number } = {}) {
  const env = {
    ...TEST_STACK_ENV,
    EVALRL_DATA_DIR: dir,
    EVALRL_MODEL_SERVER_URL: `http://127.0.0.1:${port}`,
  };
  const config = stackConfig(env);
  const tiny = path.join(dir, 'tiny-model');
  if (!fs.existsSync(tiny))
    execFileSync(
      path.join(config.venv, 'bin', 'python'),
      [
        '-m',
        'evalrl_trainer.tiny_model',
        tiny,
        ...(options.initRange ? ['--init-range', String(options.initRange)] : []),
      ],
      {
        cwd: path.join(root, 'trainer'),
        stdio: 'ignore',
      },
    );
  await startModelServer(config, tinyServerSettings(dir));
  return config;
}

/** How tests start (and restart, after a kill) the tiny model server of a folder. */
export const tinyServerSettings = (dir: string): ModelServerSettings => ({
  model: path.join(dir, 'tiny-model'),
  checkpoints: path.join(dir, 'checkpoints'),
  mode: 'deterministic',
  dtype: 'float32', // the tiny model gains nothing from bf16, and its tests are sized in fp32
});
