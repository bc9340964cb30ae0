import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { VllmServe } from '../../src/modelServer/vllmServe';
import { repoRoot } from '../../src/paths';

const trainerDir = path.join(repoRoot(), 'trainer');

/** A running vLLM double (trainer/evalrl_trainer/vllm_double.py), started from a `vllm serve` command line. */
export interface VllmDouble {
  url: string;
  /** Kills it (SIGKILL: a crash) and starts it again with the same command line: it has forgotten every adapter. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** `vllm serve MODEL …` → `python -m evalrl_trainer.vllm_double serve MODEL …`, with the command's environment. */
export async function startVllmDouble(venv: string, serve: VllmServe, logFile: string): Promise<VllmDouble> {
  const [program, ...args] = serve.argv;
  if (program !== 'vllm') throw new Error(`not a vllm command line: ${serve.argv.join(' ')}`);
  const port = args[args.indexOf('--port') + 1];
  const host = args[args.indexOf('--host') + 1];
  const url = `http://${host}:${port}`;
  let child: ChildProcess | undefined;

  const start = async () => {
    const log = fs.openSync(logFile, 'a');
    child = spawn(path.join(venv, 'bin', 'python'), ['-m', 'evalrl_trainer.vllm_double', ...args], {
      cwd: trainerDir,
      env: { ...process.env, ...serve.env, PYTHONUNBUFFERED: '1' },
      stdio: ['ignore', log, log],
    });
    fs.closeSync(log);
    child.once('exit', (code, signal) =>
      fs.appendFileSync(logFile, `[exited: code ${code}, signal ${signal}]\n`),
    );
    const deadline = Date.now() + 120_000;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(`vLLM double exited: ${fs.readFileSync(logFile, 'utf8').slice(-2000)}`);
      const up = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) }).then(
        (r) => r.ok,
        () => false,
      );
      if (up) return;
      if (Date.now() > deadline) throw new Error(`vLLM double at ${url} did not come up`);
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
  };
  const kill = async (signal: NodeJS.Signals) => {
    if (!child || child.exitCode !== null || child.signalCode !== null) return; // not running
    const exited = new Promise((resolve) => child!.once('exit', resolve));
    child.kill(signal);
    await exited;
  };

  await start();
  return {
    url,
    restart: async () => {
      await kill('SIGKILL');
      await start();
    },
    stop: () => kill('SIGTERM'),
  };
}

/** A command line without one flag (and its `values` values): a misconfigured sampler. */
export function without(serve: VllmServe, flag: string, values = 0): VllmServe {
  const at = serve.argv.indexOf(flag);
  if (at === -1) throw new Error(`${flag} is not in the command line`);
  return { ...serve, argv: [...serve.argv.slice(0, at), ...serve.argv.slice(at + 1 + values)] };
}
