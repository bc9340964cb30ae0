import type { Command } from 'commander';
import { loadConfig } from '../config';
import { vllmServe, vllmServeShell } from '../modelServer/vllmServe';
import { preflight } from '../preflight/preflight';
import type { Check } from '../preflight/samplerChecks';
import { loadRunSpec } from '../runSpec';
import { print } from './output';

export function describeChecks(checks: Check[]): string[] {
  return checks.flatMap((c) =>
    c.ok ? [`ok    ${c.name}: ${c.detail}`] : [`FAIL  ${c.name}: ${c.detail}`, `      fix: ${c.fix}`],
  );
}

/** Refuses (throws) when a check failed, naming every failure and its fix. */
export async function refuseUnlessPreflightPasses(specFile?: string): Promise<Check[]> {
  const checks = await preflight(loadConfig(), specFile ? loadRunSpec(specFile) : undefined);
  const failed = checks.filter((c) => !c.ok);
  if (failed.length)
    throw new Error(
      `preflight: ${failed.length} of ${checks.length} checks failed\n${describeChecks(failed).join('\n')}`,
    );
  return checks;
}

/** `evalrl preflight` and `evalrl sampler-command`: what a deployment must be, and whether it is. */
export function registerDeployCommands(program: Command) {
  program
    .command('preflight [spec]')
    .description(
      'check the deployment (Temporal, PostgreSQL, trainer, every sampler) before a run; exits 1 naming each fix',
    )
    .option('--json', 'machine-readable output')
    .action(async (specFile: string | undefined, opts: { json?: boolean }) => {
      const checks = await preflight(loadConfig(), specFile ? loadRunSpec(specFile) : undefined);
      print(!!opts.json, checks, () => describeChecks(checks));
      if (checks.some((c) => !c.ok)) process.exitCode = 1;
    });

  program
    .command('sampler-command <spec>')
    .description("the `vllm serve` command line of a sampling host for this spec (the pinned vLLM's flags)")
    .requiredOption('--model <path>', "the base model's folder on the sampling host")
    .option('--host <host>', 'address to bind', '0.0.0.0')
    .option('--port <port>', 'port', '8000')
    .option('--json', 'argv and environment as JSON')
    .action((specFile: string, opts: { model: string; host: string; port: string; json?: boolean }) => {
      const serve = vllmServe(loadRunSpec(specFile), {
        model: opts.model,
        host: opts.host,
        port: Number(opts.port),
      });
      print(!!opts.json, serve, () => [vllmServeShell(serve)]);
    });
}
