import { randomBytes } from 'node:crypto';
import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  type WorkflowHandle,
} from '@temporalio/client';
import type { Config } from '../config';
import { rootMessage } from '../rootMessage';
import type { RunSpec } from '../runSpec';
import { connectTemporal, temporalUiUrl } from '../stack/temporal';
import {
  cancelSignal,
  pauseSignal,
  resumeSignal,
  retryUpdate,
  runStatusQuery,
  setHyperparametersUpdate,
  stageStatusQuery,
  TASK_QUEUES,
  type RunStatus,
} from '../contract';
import type { EvaluateInput } from '../activities/rollout';
import type { HyperparameterChange, Hyperparameters } from '../hyperparameters';
import { evaluation } from '../workflows/evaluation';
import { experimentLadder, ladderRuns } from '../workflows/experimentLadder';
import { trainingRun } from '../workflows/trainingRun';

export interface RunSummary {
  runId: string;
  name: string | null;
  state: string;
  stage: string | null;
  step: number | null;
  startedAt: string;
  workflowStatus: string;
}

/** A run id from the spec's name: readable, sortable by time, unique. */
export function newRunId(spec: RunSpec): string {
  const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '');
  return `${spec.name}-${stamp}-${randomBytes(2).toString('hex')}`;
}

const QUERY_DEADLINE_MS = 10_000;

/** A running run's query went unanswered: no worker serves its workflows queue (or none is free). */
export class NoWorkerAnswered extends Error {
  constructor(
    readonly runId: string,
    readonly startedAt: number,
    reason: string,
  ) {
    super(`no worker answered run ${runId}'s query (${reason})`);
  }
}

/** Talks to runs through Temporal: start, list, status, and the messages a running job accepts. */
export class RunClient {
  private constructor(
    private readonly connection: Connection,
    private readonly client: Client,
    private readonly config: Config,
  ) {}

  static async connect(config: Config): Promise<RunClient> {
    let connection: Connection;
    try {
      connection = await connectTemporal(config, 5000);
      await connection.workflowService.getSystemInfo({});
    } catch (err) {
      // The cause tells a stopped stack from a refused certificate or API key.
      throw new Error(
        `Temporal at ${config.temporal.address} is not reachable: start the stack with \`evalrl up\` (or set TEMPORAL_ADDRESS); ${rootMessage(err)}`,
      );
    }
    return new RunClient(
      connection,
      new Client({ connection, namespace: config.temporal.namespace }),
      config,
    );
  }

  close() {
    return this.connection.close();
  }

  uiLink(runId: string): string | undefined {
    const ui = temporalUiUrl(this.config);
    return ui && `${ui}/namespaces/${this.config.temporal.namespace}/workflows/${encodeURIComponent(runId)}`;
  }

  /** Starts a run, or resumes a finished one under its id (its stages go on from their checkpoints). */
  async start(spec: RunSpec, runId = newRunId(spec)): Promise<string> {
    try {
      await this.client.workflow.start(trainingRun, {
        taskQueue: TASK_QUEUES.workflows,
        workflowId: runId,
        args: [{ runId, spec }],
      });
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError)
        throw new Error(`run ${runId} is already running: follow it with \`evalrl run watch ${runId}\``);
      throw err;
    }
    return runId;
  }

  /** Starts the seed's ladder (two runs, see experimentLadder); its table comes from `result()`. */
  async startLadder(spec: RunSpec) {
    const experimentId = newRunId({ ...spec, name: `${spec.name}-ladder` });
    const handle = await this.client.workflow.start(experimentLadder, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: experimentId,
      args: [{ experimentId, spec }],
    });
    return { experimentId, runs: ladderRuns(experimentId), result: () => handle.result() };
  }

  /** Waits until a run exists (a ladder starts its second run when the first ends). */
  async waitForRun(runId: string, pollMs = 1000) {
    for (;;) {
      try {
        return await this.handle(runId);
      } catch (err) {
        if (!/unknown run/.test((err as Error).message)) throw err;
        await new Promise((r) => setTimeout(r, pollMs));
      }
    }
  }

  /** Evaluates an adapter (or `base`) on held-out data; stored under the run id `input.runId`. */
  async evaluate(input: EvaluateInput) {
    return this.client.workflow.execute(evaluation, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: `${input.runId}/${input.label}`,
      args: [input],
    });
  }

  async list(): Promise<RunSummary[]> {
    const runs: RunSummary[] = [];
    for await (const w of this.client.workflow.list({ query: `WorkflowType = 'trainingRun'` })) {
      const attrs = w.typedSearchAttributes;
      const get = (name: string) => attrs.getAll().find((p) => p.key.name === name)?.value;
      runs.push({
        runId: w.workflowId,
        name: null,
        state: String(get('EvalrlStatus') ?? w.status.name.toLowerCase()),
        stage: (get('EvalrlStage') as string | undefined) ?? null,
        step: (get('EvalrlStep') as number | undefined) ?? null,
        startedAt: w.startTime.toISOString(),
        workflowStatus: w.status.name,
      });
    }
    return runs;
  }

  private async handle(runId: string): Promise<WorkflowHandle<typeof trainingRun>> {
    const handle = this.client.workflow.getHandle<typeof trainingRun>(runId);
    try {
      const description = await handle.describe();
      if (description.type !== 'trainingRun')
        throw new Error(`${runId} is a ${description.type} workflow, not a run`);
    } catch (err) {
      if (err instanceof WorkflowNotFoundError)
        throw new Error(`unknown run ${runId}: \`evalrl run list\` shows the runs`);
      throw err;
    }
    return handle;
  }

  /** The run's status: queried while it runs, its result once it ended. */
  async status(runId: string): Promise<RunStatus & { workflowStatus: string }> {
    const handle = await this.handle(runId);
    const { status, startTime } = await handle.describe();
    if (status.name === 'RUNNING') {
      // Without a worker on its queue a query waits for the server's own timeout; ten seconds is plenty.
      const run = await this.connection
        .withDeadline(Date.now() + QUERY_DEADLINE_MS, () => handle.query(runStatusQuery))
        .catch((err: Error) => {
          throw new NoWorkerAnswered(runId, startTime.getTime(), rootMessage(err));
        });
      // The run hears from its stage every tenth step; the stage itself knows the step and phase in flight.
      if (run.stageWorkflowId) {
        const live = await this.client.workflow
          .getHandle(run.stageWorkflowId)
          .query(stageStatusQuery)
          .catch(() => undefined);
        if (live) run.stages = { ...run.stages, [live.stage]: live };
      }
      return { ...run, workflowStatus: status.name };
    }
    if (status.name === 'COMPLETED') return { ...(await handle.result()), workflowStatus: status.name };
    const failure = await handle.result().then(
      () => 'unknown',
      (err: Error) => rootMessage(err),
    );
    throw new Error(`run ${runId} ended ${status.name.toLowerCase()}: ${failure}`);
  }

  async pause(runId: string) {
    await (await this.handle(runId)).signal(pauseSignal);
  }

  async resume(runId: string) {
    await (await this.handle(runId)).signal(resumeSignal);
  }

  async cancel(runId: string) {
    await (await this.handle(runId)).signal(cancelSignal);
  }

  /** Refused by the run (not blocked, a bad value) before it is accepted; returns the phase retried. */
  async retry(runId: string, hyperparameters?: HyperparameterChange) {
    const handle = await this.handle(runId);
    try {
      return await handle.executeUpdate(retryUpdate, { args: [{ hyperparameters }] });
    } catch (err) {
      throw new Error(rootMessage(err));
    }
  }

  /** Validated by the run before it is accepted; returns the settings the next step will use. */
  async set(runId: string, hyperparameters: HyperparameterChange): Promise<Hyperparameters> {
    const handle = await this.handle(runId);
    try {
      return await handle.executeUpdate(setHyperparametersUpdate, { args: [hyperparameters] });
    } catch (err) {
      throw new Error(rootMessage(err));
    }
  }
}
