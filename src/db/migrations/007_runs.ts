export const runs = {
  version: 7,
  name: 'runs',
  sql: `
    -- A training run and its validated spec; the workflow carries only the id.
    CREATE TABLE runs (
      id         text PRIMARY KEY,
      name       text NOT NULL,
      spec       jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    );

    -- An adapter name belongs to one run: a second run cannot silently continue (or overwrite) it.
    CREATE TABLE run_adapters (
      adapter text PRIMARY KEY,
      run_id  text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
      stage   text NOT NULL
    );

    -- Every published adapter version: the checkpoint a step produced, and its hash.
    CREATE TABLE published_adapters (
      adapter      text NOT NULL,
      step         integer NOT NULL,
      run_id       text NOT NULL,
      stage        text NOT NULL,
      checkpoint   text NOT NULL,
      sha256       text NOT NULL,
      published_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (adapter, step)
    );

    -- Evaluations on a held-out split: of a policy (success, IDK, wrong answers, turns) or of a reward model
    -- (agreement with the teacher labels, precision, recall, calibration).
    CREATE TABLE evaluations (
      run_id     text NOT NULL,
      label      text NOT NULL, -- e.g. "policy:base", "policy:step-4", "rewardModel:step-2"
      kind       text NOT NULL CHECK (kind IN ('policy', 'rewardModel')),
      model      text NOT NULL,
      split      text NOT NULL,
      metrics    jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (run_id, label)
    );
  `,
};
