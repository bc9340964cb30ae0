import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import type { Command } from 'commander';
import { loadConfig } from '../config';
import { createPool } from '../db/pool';
import { up } from '../stack/stack';
import { temporalUiUrl } from '../stack/temporal';
import { TASK_QUEUES } from '../taskQueues';
import { createWorkers, runWorkersUntil } from '../workers/start';
import { stackCheck } from '../workflows';

/** The main job, run by `make demo`: the stack comes up and a workflow runs end to end. */
export function registerDemoCommand(program: Command) {
  program
    .command('demo')
    .description('bring the stack up and run a workflow end to end (what `make demo` runs)')
    .action(async () => {
      const config = loadConfig();
      const stack = await up(config);
      console.log(`stack: Temporal ${stack.temporal}, PostgreSQL ${stack.postgres}`);
      const pool = createPool(config);
      const workers = await createWorkers(config, pool, ['workflows', 'cpu']);
      const connection = await Connection.connect({ address: config.temporal.address });
      const client = new Client({ connection, namespace: config.temporal.namespace });
      const workflowId = `stack-check-${randomUUID()}`;
      const result = await runWorkersUntil(
        workers,
        client.workflow.execute(stackCheck, {
          taskQueue: TASK_QUEUES.workflows,
          workflowId,
          args: ['evalrl stack check'],
        }),
      );
      await connection.close();
      await pool.end();
      console.log(`workflow ${workflowId} completed: stored "${result.stored}" in PostgreSQL`);
      const ui = temporalUiUrl(config);
      if (ui)
        console.log(`Temporal UI: ${ui}/namespaces/${config.temporal.namespace}/workflows/${workflowId}`);
    });
}
