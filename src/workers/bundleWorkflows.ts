// `make build` step: writes dist/workflow-bundle.js, which workers load instead of bundling at start.
import { workflowBundlePath, writeWorkflowBundle } from './workflowBundle';

writeWorkflowBundle().then(
  (wrote) => console.log(`${workflowBundlePath()}: ${wrote ? 'written' : 'up to date'}`),
  (err: Error) => {
    console.error(err);
    process.exitCode = 1;
  },
);
