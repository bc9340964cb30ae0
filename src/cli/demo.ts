import path from 'node:path';
import type { Command } from 'commander';
import { loadConfig } from '../config';
import { createPool } from '../db/pool';
import { generateQuestions } from '../mail/generateQuestions';
import { ingest } from '../mail/ingest';
import { readMaildir } from '../mail/sources';
import { repoRoot } from '../paths';
import { newRunId, RunClient } from '../runs/runClient';
import { writeReport } from '../report/writeReport';
import { loadRunSpec } from '../runSpec';
import { startModelServer } from '../stack/modelServer';
import { up } from '../stack/stack';
import { createWorkers, runWorkersUntil, WORKER_QUEUES } from '../workers/start';
import { watchRun } from './watchRun';

/**
 * The main job, run by `make demo`: the stack and the CPU model server come up, the Enron mail is
 * ingested and questions derived, and the two-stage run of examples/demo.yaml trains on SmolLM2-135M with
 * live progress. It ends with the measured figures and the Temporal UI link.
 */
export function registerDemoCommand(program: Command) {
  program
    .command('demo')
    .description('run the main job end to end on this machine (what `make demo` runs)')
    .option('--spec <file>', 'run spec', path.join(repoRoot(), 'examples', 'demo.yaml'))
    .action(async (opts: { spec: string }) => {
      const config = loadConfig();
      const spec = loadRunSpec(opts.spec);
      const stack = await up(config);
      console.log(`stack: Temporal ${stack.temporal}, PostgreSQL ${stack.postgres}`);
      const server = await startModelServer(config, {
        checkpoints: path.join(config.dataDir, 'checkpoints'),
        mode: 'throughput',
        threads: 2,
      });
      console.log(`model server (SmolLM2-135M-Instruct, CPU): ${server} at ${config.modelServer.url}`);
      const pool = createPool(config);
      const mail = await ingest(pool, readMaildir(config.maildir));
      console.log(
        `mail: ${mail.stored} stored, ${mail.alreadyIngested} already ingested, ${mail.rejected} rejected (${config.maildir})`,
      );
      const questions = await generateQuestions(pool, {
        seed: '0',
        testFraction: 0.3,
        teacher: config.teacher,
      });
      console.log(`questions: ${questions.generated} (${questions.inserted} new)`);

      // Each demo run trains its own adapters (an adapter name belongs to one run).
      const runId = newRunId(spec);
      const suffix = runId.slice(spec.name.length + 1);
      for (const stage of ['policy', 'rewardModel'] as const)
        spec.models[stage].adapter = `${spec.models[stage].adapter}-${suffix}`.slice(0, 64);
      const workers = await createWorkers(config, pool, WORKER_QUEUES);
      const runs = await RunClient.connect(config);
      try {
        await runs.start(spec, runId);
        console.log(`run ${runId} started; Temporal UI: ${runs.uiLink(runId) ?? '(external server)'}`);
        const final = await runWorkersUntil(workers, watchRun(config, runId));
        const base = final.evaluations.find((e) => e.label === 'policy:base');
        const trained = final.evaluations
          .filter((e) => e.kind === 'policy' && e.label !== 'policy:base')
          .at(-1);
        const rm = final.evaluations.filter((e) => e.kind === 'rewardModel');
        console.log('\nmeasured:');
        if (base && trained)
          console.log(
            `  policy success on ${spec.evaluation.questions} held-out questions: base ${base.metrics.successRate.toFixed(3)} → trained ${trained.metrics.successRate.toFixed(3)}`,
          );
        for (const e of rm)
          console.log(`  reward model ${e.label}: agreement with labels ${e.metrics.agreement.toFixed(3)}`);
        const report = await writeReport(pool, runId, path.join(config.dataDir, 'reports', runId));
        console.log(`report: ${report.html}`);
        console.log(`Temporal UI: ${runs.uiLink(runId) ?? '(external server)'}`);
      } finally {
        await runs.close();
        await pool.end();
      }
    });
}
