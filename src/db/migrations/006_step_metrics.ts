export const stepMetrics = {
  version: 6,
  name: 'step_metrics',
  sql: `
    -- One row per trained GRPO step: rewards, kept/dropped groups, optimizer metrics, phase durations.
    CREATE TABLE step_metrics (
      run_id     text NOT NULL,
      stage      text NOT NULL,
      step       integer NOT NULL,
      metrics    jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (run_id, stage, step)
    );
  `,
};
