#!/usr/bin/env node
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { Command } from 'commander';
import { registerDemoCommand } from './demo';
import { registerIngestCommand } from './ingestCommand';
import { fail } from './output';
import { registerQuestionsCommand } from './questionsCommand';
import { registerRunCommands } from './runCommands';
import { registerStackCommands } from './stackCommands';
import { registerWorkerCommand } from './workerCommand';

Runtime.install({ logger: new DefaultLogger('WARN') });

const program = new Command('evalrl')
  .description('Durable training for eval-centric agentic RL on Temporal')
  .showHelpAfterError();

registerStackCommands(program);
registerWorkerCommand(program);
registerIngestCommand(program);
registerQuestionsCommand(program);
registerRunCommands(program);
registerDemoCommand(program);

program.parseAsync(process.argv).catch(fail);
