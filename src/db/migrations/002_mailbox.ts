export const mailbox = {
  version: 2,
  name: 'mailbox',
  sql: `
    CREATE EXTENSION IF NOT EXISTS btree_gin;

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
      source_file  text NOT NULL
    );
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
    -- several mailboxes (sender and recipient both in the corpus). The full-text index lives here, keyed by
    -- inbox too (btree_gin), so a search intersects the inbox and the keywords inside one GIN scan instead of
    -- matching the whole corpus and filtering.
    CREATE TABLE mailbox_messages (
      inbox_id    text NOT NULL REFERENCES inboxes (id),
      email_id    bigint NOT NULL REFERENCES emails (id) ON DELETE CASCADE,
      date        timestamptz NOT NULL, -- copied from emails so that inbox + date filters use one index
      folder      text NOT NULL,
      tsv         tsvector NOT NULL,   -- subject (weight A) and body (weight B), English
      PRIMARY KEY (inbox_id, email_id)
    );
    CREATE INDEX mailbox_messages_date ON mailbox_messages (inbox_id, date DESC);
    CREATE INDEX mailbox_messages_search ON mailbox_messages USING gin (inbox_id, tsv);

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
