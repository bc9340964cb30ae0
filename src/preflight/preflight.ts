import { z } from 'zod';
import type { Config } from '../config';
import { createPool } from '../db/pool';
import { MIGRATIONS } from '../db/migrations';
import type { RunSpec } from '../runSpec';
import { temporalHealthy } from '../stack/temporal';
import { checkSampler, type Check } from './samplerChecks';

/**
 * Checks a deployment before a run starts: Temporal and PostgreSQL answer, the trainer answers and writes to its
 * checkpoint folder, and every sampling host serves, parses, samples and loads adapters as the run needs
 * (samplerChecks.ts). Each failed check says what to change.
 */
export async function preflight(config: Config, spec?: RunSpec): Promise<Check[]> {
  const trainer = await checkTrainer(config, spec?.lora.rank ?? 16);
  const samplers = config.samplingServers ?? [config.modelServer.url];
  const checks = [await checkTemporal(config), await checkPostgres(config), trainer.check];
  for (const url of samplers)
    checks.push(
      ...(await checkSampler({
        url,
        token: config.modelServer.token,
        probe: trainer.probe,
        contextTokens: spec?.sampling.contextTokens,
      })),
    );
  return checks;
}

async function checkTemporal(config: Config): Promise<Check> {
  const name = `Temporal at ${config.temporal.address}, namespace ${config.temporal.namespace}`;
  const answered = await temporalHealthy(config).catch((err: Error) => err);
  return answered === true
    ? { name, ok: true, detail: 'answers' }
    : {
        name,
        ok: false,
        detail: answered instanceof Error ? answered.message : 'no answer',
        fix: config.temporal.external
          ? 'check TEMPORAL_ADDRESS, its TLS settings and that the namespace is registered'
          : 'start the local stack with `evalrl up`',
      };
}

async function checkPostgres(config: Config): Promise<Check> {
  const name = 'PostgreSQL';
  const pool = createPool(config, 1);
  try {
    const { rows } = await pool.query<{ version: number }>(
      'SELECT max(version) AS version FROM schema_migrations',
    );
    const latest = MIGRATIONS.at(-1)!.version;
    return rows[0].version === latest
      ? { name, ok: true, detail: `schema at migration ${latest}` }
      : {
          name,
          ok: false,
          detail: `schema at migration ${rows[0].version}, this evalrl needs ${latest}`,
          fix: 'run `evalrl up` (it applies pending migrations)',
        };
  } catch (err) {
    return {
      name,
      ok: false,
      detail: (err as Error).message,
      fix: config.postgres.external ? 'check DATABASE_URL' : 'start the local stack with `evalrl up`',
    };
  } finally {
    await pool.end();
  }
}

const probeSchema = z.object({ path: z.string() });

/** The trainer writes a probe adapter of the run's rank into its checkpoint folder; the samplers must load it. */
async function checkTrainer(config: Config, rank: number): Promise<{ check: Check; probe?: string }> {
  const name = `trainer (model server) at ${config.modelServer.url}`;
  try {
    const response = await fetch(new URL('/checkpoints/probe', config.modelServer.url), {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(config.modelServer.token ? { authorization: `Bearer ${config.modelServer.token}` } : {}),
      },
      body: JSON.stringify({ rank }),
      signal: AbortSignal.timeout(60_000),
    });
    const probe = probeSchema.parse(await response.json()).path;
    return { check: { name, ok: true, detail: `wrote a probe adapter at ${probe}` }, probe };
  } catch (err) {
    return {
      check: {
        name,
        ok: false,
        detail: (err as Error).message,
        fix: 'start `python -m evalrl_trainer.server` at EVALRL_MODEL_SERVER_URL, with EVALRL_MODEL_SERVER_TOKEN',
      },
    };
  }
}
