import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Runtime, Worker } from '@temporalio/worker';
import { TASK_QUEUES } from '../../src/contract';
import { parseRunSpec } from '../../src/runSpec';
import { stopModelServer } from '../../src/stack/modelServer';
import { workerLogger } from '../../src/workers/logger';
import { trainingRun } from '../../src/workflows/trainingRun';
import { tinyRunSpec, withWorkers } from './runFixtures';
import { cli, stackConfig, startTinyModelServer, tempDataDir, TEST_STACK_ENV } from './testStack';

jest.setTimeout(600_000);
Runtime.install({ logger: workerLogger('ERROR') });

/**
 * A worker upgraded in the middle of a run must replay the histories the previous version wrote, so every
 * change of a workflow's behaviour goes behind `patched`. The fixtures are a run recorded by an earlier
 * version; `EVALRL_RECORD_HISTORIES=1` records new ones (with that version's code built).
 */
const FIXTURES = path.resolve(__dirname, '../fixtures/histories');
const workflowsPath = require.resolve('../../src/workflows');

it('replays the histories of a run recorded by an earlier version against the current workflow code', async () => {
  if (process.env.EVALRL_RECORD_HISTORIES) await recordHistories();
  const files = fs.readdirSync(FIXTURES).filter((f) => f.endsWith('.json'));
  expect(files.sort()).toEqual(['run.json', 'run.policy.json', 'run.rewardModel.json']);
  for (const file of files) {
    // As `temporal workflow show --output json` prints it; the worker reads that form itself.
    const history: unknown = JSON.parse(fs.readFileSync(path.join(FIXTURES, file), 'utf8'));
    await Worker.runReplayHistory({ workflowsPath }, history, file);
  }
  // The stage histories tell their run of every step, as stages did before `stage-progress-every-ten-steps`:
  // the replay above took the unpatched branch.
  const stage = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'run.policy.json'), 'utf8'));
  const signals = stage.events.filter((e: { eventType: string }) =>
    /SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED/.test(e.eventType),
  );
  expect(signals.length).toBeGreaterThanOrEqual(3); // start, each of two steps, end
});

/** One tiny run whose stages run two steps in one workflow run each, its three histories written out. */
async function recordHistories() {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  const dir = tempDataDir('evalrl-replay-');
  const config = await startTinyModelServer(dir, 18019);
  try {
    const runId = `history-${Date.now()}`;
    const spec = parseRunSpec({ ...tinyRunSpec(`history-${Date.now()}`), continueAsNewEverySteps: 10 });
    await withWorkers(config, async (client) => {
      const handle = await client.workflow.start(trainingRun, {
        taskQueue: TASK_QUEUES.workflows,
        workflowId: runId,
        args: [{ runId, spec }],
      });
      await handle.result();
      fs.mkdirSync(FIXTURES, { recursive: true });
      const { temporal } = stackConfig();
      for (const [file, workflowId] of [
        ['run.json', runId],
        ['run.rewardModel.json', `${runId}/rewardModel`],
        ['run.policy.json', `${runId}/policy`],
      ])
        fs.writeFileSync(
          path.join(FIXTURES, file),
          execFileSync(path.join(TEST_STACK_ENV.EVALRL_VENV, 'bin', 'temporal'), [
            'workflow',
            'show',
            '--workflow-id',
            workflowId,
            '--output',
            'json',
            '--address',
            temporal.address,
            '--namespace',
            temporal.namespace,
          ]),
        );
    });
  } finally {
    await stopModelServer(config);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
