export const trajectories = {
  version: 4,
  name: 'trajectories',
  sql: `
    -- One agent episode, stored once under its idempotent key; Temporal history carries only the id.
    CREATE TABLE trajectories (
      id          bigserial PRIMARY KEY,
      run_id      text NOT NULL,
      stage       text NOT NULL,
      step        integer NOT NULL,
      task_id     text NOT NULL,
      sample      integer NOT NULL,
      question_id text REFERENCES questions (id),
      messages    jsonb NOT NULL,
      turns       jsonb NOT NULL, -- per model call: prompt and sampled token ids, logprobs, timings
      facts       jsonb NOT NULL,
      wall_ms     integer NOT NULL,
      created_at  timestamptz NOT NULL DEFAULT now(),
      UNIQUE (run_id, stage, step, task_id, sample)
    );

    -- Every component of the deterministic reward layer, and its shaped total.
    CREATE TABLE deterministic_rewards (
      trajectory_id bigint PRIMARY KEY REFERENCES trajectories (id) ON DELETE CASCADE,
      components    jsonb NOT NULL,
      total         real NOT NULL
    );
  `,
};
