export const emailIdentity = {
  version: 10,
  name: 'email_identity',
  sql: `
    -- An email is its Message-ID and its content: two inboxes share a row only when their copies are the
    -- same (subject, sender, date, body, recipients with Bcc). Keyed by Message-ID alone, inbox B could read
    -- A's copy (its body, its Bcc list), and a forged Message-ID could stand in for another inbox's mail.
    -- Rows stored before share one placeholder digest: a later identical copy is stored beside them, once.
    ALTER TABLE emails ADD COLUMN digest text;
    UPDATE emails SET digest = 'stored before digests';
    ALTER TABLE emails ALTER COLUMN digest SET NOT NULL;
    ALTER TABLE emails DROP CONSTRAINT emails_message_id_key;
    ALTER TABLE emails ADD CONSTRAINT emails_identity UNIQUE (message_id, digest);
  `,
};
