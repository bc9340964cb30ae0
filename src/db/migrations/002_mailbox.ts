export const mailbox = {
  version: 2,
  name: 'mailbox',
  sql: `
    -- One row per owner mailbox (a maildir user, or the --inbox of an mbox/JSONL ingest).
    CREATE TABLE inboxes (
      id      text PRIMARY KEY,
      address text
    );

    -- One row per distinct Message-ID, wherever it was found first.
    CREATE TABLE emails (
      id           bigserial PRIMARY KEY,
      message_id   text NOT NULL UNIQUE,
      subject      text NOT NULL,
      from_address text NOT NULL,
      from_name    text NOT NULL,
      date         timestamptz NOT NULL,
      body         text NOT NULL,
      folder       text NOT NULL,
      source_file  text NOT NULL,
      tsv          tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', subject), 'A') || setweight(to_tsvector('english', left(body, 100000)), 'B')
      ) STORED
    );
    CREATE INDEX emails_tsv ON emails USING gin (tsv);
    CREATE INDEX emails_from ON emails (from_address);

    CREATE TABLE recipients (
      email_id bigint NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
      kind     text NOT NULL CHECK (kind IN ('to', 'cc', 'bcc')),
      address  text NOT NULL,
      name     text NOT NULL,
      PRIMARY KEY (email_id, kind, address)
    );
    CREATE INDEX recipients_address ON recipients (address, email_id);

    -- Which mailbox holds which email: the agent of an inbox sees only these. The same email can sit in
    -- several mailboxes (sender and recipient both in the corpus).
    CREATE TABLE mailbox_messages (
      inbox_id    text NOT NULL REFERENCES inboxes (id),
      email_id    bigint NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
      date        timestamptz NOT NULL, -- copied from emails so that inbox + date filters use one index
      folder      text NOT NULL,
      PRIMARY KEY (inbox_id, email_id)
    );
    CREATE INDEX mailbox_messages_date ON mailbox_messages (inbox_id, date DESC);

    -- Every source ever read (a maildir file, an mbox message, a JSONL line) and what became of it: the
    -- ledger that makes ingest resumable (a source here is not read again) and its report.
    CREATE TABLE ingest_sources (
      source_file text PRIMARY KEY,
      inbox_id    text NOT NULL,
      status      text NOT NULL CHECK (status IN ('stored', 'duplicate', 'rejected')),
      message_id  text,
      reason      text,
      ingested_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX ingest_sources_status ON ingest_sources (status);
  `,
};
