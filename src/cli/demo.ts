import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { loadConfig } from '../config';
import { createPool } from '../db/pool';
import { generateQuestions } from '../mail/generateQuestions';
import { ingest } from '../mail/ingest';
import { readMaildir } from '../mail/sources';
import { repoRoot } from '../paths';
import { writeReport } from '../report/writeReport';
import { RunClient } from '../runs/runClient';
import { loadRunSpec } from '../runSpec';
import {
  modelServerPeakGib,
  modelServerUsage,
  resetModelServerPeak,
  samplingUsageBetween,
  startModelServer,
} from '../stack/modelServer';
import { up } from '../stack/stack';
import { createStore } from '../store';
import { createWorkers, runWorkersUntil, WORKER_QUEUES } from '../workers/start';
import { ladderTable } from './experimentCommand';
import { openRunsWarning } from './runFormat';
import { watchRun } from './watchRun';

/**
 * The main job, run by `make demo`: the stack and the CPU model server come up, the Enron mail is ingested
 * and questions derived, and the seed's ladder runs at laptop size (examples/demo.yaml): warm starts, the
 * reward model's GRPO stage, and the policy trained once with the trained and once with the untrained reward
 * model, with live progress. It ends with the ladder's rows and their errors, the model server's peak
 * memory, the reports and the Temporal UI links.
 */
export function registerDemoCommand(program: Command) {
  program
    .command('demo')
    .description('run the main job end to end on this machine (what `make demo` runs)')
    .option('--spec <file>', 'run spec', path.join(repoRoot(), 'examples', 'demo.yaml'))
    .option('--out <file>', 'also write the ladder as JSON')
    .action(async (opts: { spec: string; out?: string }) => {
      const started = Date.now();
      const config = loadConfig();
      const spec = loadRunSpec(opts.spec);
      const stack = await up(config);
      console.log(`stack: Temporal ${stack.temporal}, PostgreSQL ${stack.postgres}`);
      const server = await startModelServer(config, {
        checkpoints: path.join(config.dataDir, 'checkpoints'),
        mode: 'throughput',
        threads: 2,
        maxBatch: 16,
      });
      console.log(`model server (SmolLM2-135M-Instruct, CPU): ${server} at ${config.modelServer.url}`);
      // A server reused from an earlier job: the figures printed at the end are this job's alone.
      if (server !== 'started') resetModelServerPeak(config);
      const usageBefore = await modelServerUsage(config).catch(() => null);
      const pool = createPool(config);
      const mail = await ingest(pool, readMaildir(config.maildir));
      console.log(
        `mail: ${mail.stored} stored, ${mail.alreadyIngested} already ingested, ${mail.rejected} rejected (${config.maildir})`,
      );
      const questions = await generateQuestions(createStore(pool), {
        seed: '0',
        testFraction: 0.3,
        teacher: config.teacher,
      });
      console.log(`questions: ${questions.generated} (${questions.inserted} new)`);

      const workers = await createWorkers(config, pool, WORKER_QUEUES);
      const runs = await RunClient.connect(config);
      try {
        for (const line of openRunsWarning(await runs.list())) console.log(line);
        const ladder = await runs.startLadder(spec);
        console.log(
          `experiment ${ladder.experimentId}: the ladder of ${path.relative(process.cwd(), opts.spec) || opts.spec}, two runs`,
        );
        const result = await runWorkersUntil(
          workers,
          (async () => {
            for (const runId of [ladder.runs.trained, ladder.runs.untrained]) {
              await runs.waitForRun(runId);
              console.log(`\nrun ${runId} — Temporal UI: ${runs.uiLink(runId) ?? '(external server)'}`);
              await watchRun(config, runId);
            }
            return ladder.result();
          })(),
        );
        const wallSeconds = Math.round((Date.now() - started) / 1000);
        const peak = modelServerPeakGib(config);
        const usageAfter = await modelServerUsage(config).catch(() => null);
        const sampling = usageAfter && samplingUsageBetween(usageBefore, usageAfter);
        console.log(
          '\nmeasured (SmolLM2-135M on this CPU; errors are standard errors over the held-out items):',
        );
        for (const line of ladderTable(result)) console.log(`  ${line}`);
        console.log(
          `  model server peak resident memory: ${peak === null ? 'unknown' : `${peak.toFixed(2)} GiB`}`,
        );
        if (sampling)
          console.log(
            `  model server sampling: prefill ${sampling.prefill_s} s (${sampling.prompt_tokens_computed} prompt ` +
              `tokens computed, ${sampling.prompt_tokens_cached} from the prefix cache), ` +
              `decoding ${sampling.decode_s} s (${sampling.decoded_tokens} tokens), ` +
              `${sampling.shared_samples} samples shared by equal requests`,
          );
        console.log(`  wall time: ${wallSeconds} s`);
        if (opts.out)
          fs.writeFileSync(
            opts.out,
            `${JSON.stringify({ ...result, wall_seconds: wallSeconds, model_server_peak_gib: peak, model_server_sampling: sampling }, null, 2)}\n`,
          );
        for (const runId of [ladder.runs.trained, ladder.runs.untrained]) {
          const report = await writeReport(
            pool,
            runId,
            path.join(config.dataDir, 'reports', runId.replace(/\//g, '_')),
          );
          console.log(`report: ${report.html}`);
        }
      } finally {
        await runs.close();
        await pool.end();
      }
    });
}
