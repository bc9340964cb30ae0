export const searchAsWritten = {
  version: 13,
  name: 'search_as_written',
  sql: `
    -- "As written" means as written. Migration 011 kept a word's unstemmed form only where it differed from
    -- its stem, and tested exact matches against the stems as well: "notion" then matched an email holding
    -- only "notional" (stem: notion) as written, which could rank it before the email holding "notion"
    -- (bench/recall's one miss against FTS5). Every word's unstemmed form is now kept at weight D, and the
    -- exact test reads weight D alone.
    CREATE OR REPLACE FUNCTION evalrl_search_vector(subject text, body text) RETURNS tsvector
      LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
        DECLARE
          s text := evalrl_search_text(subject);
          b text := evalrl_search_text(left(body, 100000));
        BEGIN
          RETURN setweight(to_tsvector('english', s), 'A') || setweight(to_tsvector('english', b), 'B')
            || setweight(to_tsvector('evalrl_unstemmed', s || ' ' || b), 'D');
        END
      $$;

    -- A plainto_tsquery's lexemes ('word', quotes inside doubled) restricted to weight D: the words as written.
    CREATE FUNCTION evalrl_as_written(query tsquery) RETURNS tsquery
      LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT regexp_replace(query::text, '''(?:[^'']|'''')*''', '\\&:D', 'g')::tsquery
      $$;

    UPDATE mailbox_messages m SET tsv = evalrl_search_vector(e.subject, e.body)
    FROM emails e WHERE e.id = m.email_id;
  `,
};
