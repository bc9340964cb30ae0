export const questions = {
  version: 3,
  name: 'questions',
  sql: `
    CREATE TABLE questions (
      id            text PRIMARY KEY, -- a hash of source and content: regenerating inserts nothing new
      question      text NOT NULL,
      answer        text NOT NULL,
      message_ids   text[] NOT NULL CHECK (cardinality(message_ids) > 0),
      inbox_id      text NOT NULL REFERENCES inboxes (id),
      query_date    timestamptz NOT NULL,
      split         text NOT NULL CHECK (split IN ('train', 'test')),
      source        text NOT NULL,
      how_realistic real,
      created_at    timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX questions_split ON questions (split, inbox_id);
  `,
};
