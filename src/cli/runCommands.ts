import { isDeepStrictEqual } from 'node:util';
import type { Command } from 'commander';
import { loadConfig } from '../config';
import { createPool } from '../db/pool';
import { healthFlags } from '../runs/health';
import { createStore, type Store } from '../store';
import { NoWorkerAnswered, RunClient } from '../runs/runClient';
import { storedRunStatus } from '../runs/storedStatus';
import { loadRunSpec, type RunSpec } from '../runSpec';
import { refuseUnlessPreflightPasses } from './deployCommands';
import { print } from './output';
import { parseAssignments } from '../hyperparameters';
import { describeRun } from './runFormat';
import { watchRun } from './watchRun';

/** With no worker to answer, a running run's status is what it stored, and the user is told why. */
async function statusFromStore(store: Store, err: unknown) {
  if (!(err instanceof NoWorkerAnswered)) throw err;
  const [data, spec] = await Promise.all([
    store.runs.reportData(err.runId),
    store.runs.storedSpec(err.runId),
  ]);
  if (!data || !spec) throw err;
  return {
    status: { ...storedRunStatus(data, spec, err.startedAt), workflowStatus: 'RUNNING' },
    note:
      `${err.message}: shown from what the run stored (phase and ETA unknown); ` +
      'start one with `evalrl worker --queues workflows,cpu,rollout,judge,gpu`',
  };
}

/** `--id` of a run that exists is a resume, and a resume is of the same run: another spec is refused. */
async function refuseAnotherRunsId(runId: string, spec: RunSpec) {
  const pool = createPool(loadConfig(), 1);
  try {
    const stored = await createStore(pool).runs.storedSpec(runId);
    if (stored && !isDeepStrictEqual(stored, JSON.parse(JSON.stringify(spec))))
      throw new Error(
        `--id ${runId}: that run exists with another spec; a resume must use its spec, a new run another id`,
      );
  } finally {
    await pool.end();
  }
}

async function withRuns<T>(use: (runs: RunClient) => Promise<T>): Promise<T> {
  const runs = await RunClient.connect(loadConfig());
  try {
    return await use(runs);
  } finally {
    await runs.close();
  }
}

/** `evalrl run …`: start a run from a spec, list runs, see where one stands, and steer it. */
export function registerRunCommands(program: Command) {
  const run = program.command('run').description('start, list, watch and steer training runs');

  run
    .command('start <spec>')
    .description('validate a run spec (YAML or JSON) and start the run; prints its id and Temporal UI link')
    .option('--id <runId>', 'run id (default: the spec name, a timestamp and a random suffix)')
    .option('--json', 'machine-readable output')
    .option('--no-preflight', 'skip the deployment check a run on a sampling pool gets first')
    .action(async (file: string, opts: { id?: string; json?: boolean; preflight: boolean }) => {
      const spec = loadRunSpec(file); // every bad field, by its path, before anything starts
      if (opts.id) await refuseAnotherRunsId(opts.id, spec);
      // A production deployment (a sampling pool) is checked before anything starts; the local stack needs no check.
      if (opts.preflight && loadConfig().samplingServers) await refuseUnlessPreflightPasses(file);
      await withRuns(async (runs) => {
        const runId = await runs.start(spec, opts.id);
        const ui = runs.uiLink(runId);
        print(!!opts.json, { runId, ui }, () => [
          `started run ${runId}`,
          ...(ui ? [`Temporal UI: ${ui}`] : []),
          `follow it with: evalrl run watch ${runId}`,
        ]);
      });
    });

  run
    .command('list')
    .description('runs, newest first, from their search attributes')
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean }) =>
      withRuns(async (runs) => {
        const all = await runs.list();
        print(!!opts.json, all, () =>
          all.length === 0
            ? ['no runs yet: start one with `evalrl run start SPEC`']
            : all.map(
                (r) =>
                  `${r.runId}  ${r.state.padEnd(9)} ${(r.stage ?? '').padEnd(12)} step ${r.step ?? '–'}  started ${r.startedAt}`,
              ),
        );
      }),
    );

  run
    .command('status <runId>')
    .description('stage, step, phase, latest metrics, evaluations, checkpoints, ETA')
    .option('--json', 'machine-readable output')
    .action(async (runId: string, opts: { json?: boolean }) =>
      withRuns(async (runs) => {
        const pool = createPool(loadConfig(), 1);
        try {
          const store = createStore(pool);
          const { status: s, note } = await runs.status(runId).then(
            (status) => ({ status, note: null }),
            (err: unknown) => statusFromStore(store, err),
          );
          const flags = healthFlags(await store.runs.stepHistory(runId), s.evaluations);
          print(!!opts.json, { ...s, health: flags, note }, () => [
            ...describeRun(s, flags),
            ...(note ? [`  ${note}`] : []),
          ]);
        } finally {
          await pool.end();
        }
      }),
    );

  run
    .command('watch <runId>')
    .description('live progress until the run ends: stage bars, phase, reward and success sparklines, ETA')
    .option('--interval <seconds>', 'refresh interval', '2')
    .action(async (runId: string, opts: { interval: string }) => {
      await watchRun(loadConfig(), runId, Number(opts.interval) * 1000);
    });

  for (const [name, what] of [
    ['pause', 'no new step starts until resume'],
    ['resume', 'continue a paused run'],
    ['cancel', 'end the run after the step in flight is checkpointed'],
  ] as const)
    run
      .command(`${name} <runId>`)
      .description(what)
      .action(async (runId: string) =>
        withRuns(async (runs) => {
          await runs[name](runId);
          console.log(`${name}: sent to run ${runId}`);
        }),
      );

  run
    .command('retry <runId> [settings...]')
    .description('retry the blocked phase of a run, optionally with new hyperparameters (key=value)')
    .action(async (runId: string, settings: string[]) =>
      withRuns(async (runs) => {
        const { phase } = await runs.retry(runId, settings.length ? parseAssignments(settings) : undefined);
        console.log(`retry: run ${runId} retries its ${phase} phase`);
      }),
    );

  run
    .command('set <runId> <settings...>')
    .description('change hyperparameters from the next step, e.g. `learning_rate=1e-5 clip_high=0.3`')
    .option('--json', 'machine-readable output')
    .action(async (runId: string, settings: string[], opts: { json?: boolean }) =>
      withRuns(async (runs) => {
        const applied = await runs.set(runId, parseAssignments(settings));
        print(!!opts.json, applied, () => [
          `run ${runId}: from the next step ${Object.entries(applied)
            .map(([k, v]) => `${k}=${v}`)
            .join(' ')}`,
        ]);
      }),
    );
}
