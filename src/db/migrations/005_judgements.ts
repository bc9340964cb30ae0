export const judgements = {
  version: 5,
  name: 'judgements',
  sql: `
    -- One Skill-RM judgement of a trajectory, stored once under its key (judge adapter, mode, sample).
    CREATE TABLE judgements (
      id             bigserial PRIMARY KEY,
      trajectory_id  bigint NOT NULL REFERENCES trajectories (id) ON DELETE CASCADE,
      judge_key      text NOT NULL,
      judge_model    text NOT NULL,
      mode           text NOT NULL CHECK (mode IN ('baseline', 'skill')),
      score          real NOT NULL,
      failed         boolean NOT NULL,
      failure        text,
      verdict        jsonb,
      evidence       jsonb NOT NULL,
      skills_used    text[] NOT NULL,
      resources_read text[] NOT NULL,
      applied        text[] NOT NULL,
      messages       jsonb NOT NULL,
      turns          jsonb NOT NULL, -- the judge's sampled tokens: the reward-model stage trains on them
      created_at     timestamptz NOT NULL DEFAULT now(),
      UNIQUE (trajectory_id, judge_key)
    );

    -- The label the reward model learns to agree with: a teacher's, or the deterministic layer's. Cached.
    CREATE TABLE teacher_labels (
      trajectory_id bigint PRIMARY KEY REFERENCES trajectories (id) ON DELETE CASCADE,
      correct       boolean NOT NULL,
      reason        text NOT NULL,
      source        text NOT NULL,
      created_at    timestamptz NOT NULL DEFAULT now()
    );
  `,
};
