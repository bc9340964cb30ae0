#!/usr/bin/env node
import { Runtime } from '@temporalio/worker';
import { Command } from 'commander';
import { registerDemoCommand } from './demo';
import { registerDeployCommands } from './deployCommands';
import { registerEvalCommand } from './evalCommand';
import { registerExperimentCommand } from './experimentCommand';
import { registerIngestCommand } from './ingestCommand';
import { fail } from './output';
import { registerQuestionsCommand } from './questionsCommand';
import { registerReportCommand } from './reportCommand';
import { registerRunCommands } from './runCommands';
import { registerStackCommands } from './stackCommands';
import { registerWorkerCommand } from './workerCommand';
import { workerLogger } from '../workers/logger';

Runtime.install({ logger: workerLogger() });

const program = new Command('evalrl')
  .description('Durable training for eval-centric agentic RL on Temporal')
  .showHelpAfterError();

registerStackCommands(program);
registerWorkerCommand(program);
registerIngestCommand(program);
registerQuestionsCommand(program);
registerRunCommands(program);
registerDeployCommands(program);
registerEvalCommand(program);
registerExperimentCommand(program);
registerReportCommand(program);
registerDemoCommand(program);

program.parseAsync(process.argv).catch(fail);
