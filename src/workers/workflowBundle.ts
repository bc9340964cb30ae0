import fs from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import { repoRoot } from '../paths';
import { workerLogger } from './logger';

/**
 * Workflow code bundled once by `make build`, so that a worker starts without running webpack (seconds).
 * A bundle older than any source is ignored: workers then bundle at start, as a fresh clone's tests do.
 */
export const workflowBundlePath = () => path.join(repoRoot(), 'dist', 'workflow-bundle.js');

const workflowsPath = () => require.resolve('../workflows');

/** The worker option naming the workflow code: the prebuilt bundle while it is fresh, else the sources. */
export function workflowCode(): { workflowBundle: { codePath: string } } | { workflowsPath: string } {
  return workflowBundleFresh()
    ? { workflowBundle: { codePath: workflowBundlePath() } }
    : { workflowsPath: workflowsPath() };
}

/** Writes the bundle unless a fresh one is there; returns whether it wrote. */
export async function writeWorkflowBundle(): Promise<boolean> {
  if (workflowBundleFresh()) return false;
  const { code } = await bundleWorkflowCode({ workflowsPath: workflowsPath(), logger: workerLogger() });
  fs.mkdirSync(path.dirname(workflowBundlePath()), { recursive: true });
  fs.writeFileSync(workflowBundlePath(), code);
  return true;
}

function workflowBundleFresh(): boolean {
  const bundle = fs.statSync(workflowBundlePath(), { throwIfNoEntry: false });
  return bundle !== undefined && bundle.mtimeMs > newestInputMtime();
}

/**
 * Workflows import contract, hyperparameter and GRPO code from across src/, and the SDK's workflow
 * runtime is part of the bundle: any source or a new lock file makes it stale.
 */
function newestInputMtime(): number {
  const root = repoRoot();
  const src = path.join(root, 'src');
  const sources = fs
    .readdirSync(src, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts'))
    .map((file) => path.join(src, file));
  return Math.max(
    ...[...sources, path.join(root, 'package-lock.json')].map((file) => fs.statSync(file).mtimeMs),
  );
}
