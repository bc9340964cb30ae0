export const stackChecks = {
  version: 1,
  name: 'stack_checks',
  sql: `
    CREATE TABLE stack_checks (
      workflow_id text PRIMARY KEY,
      message     text NOT NULL,
      created_at  timestamptz NOT NULL DEFAULT now()
    );
  `,
};
