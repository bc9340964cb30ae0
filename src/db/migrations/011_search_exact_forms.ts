export const searchExactForms = {
  version: 11,
  name: 'search_exact_forms',
  sql: `
    -- Emails that hold a keyword as written rank before those that match it only by its stem. Stemming
    -- alone buried a rare word: "placed" is searched as "place", which hundreds of emails hold, so the one
    -- email with "placed" fell out of the top 10 (bench/recall: 8 % of rare body words missed, against none
    -- for SQLite FTS5, which does not stem). The index keeps, at weight D, each word's unstemmed form where it
    -- differs from its stem; search matches stems as before and orders exact matches first.
    CREATE TEXT SEARCH DICTIONARY evalrl_unstemmed (TEMPLATE = pg_catalog.simple, STOPWORDS = english);
    CREATE TEXT SEARCH CONFIGURATION evalrl_unstemmed (COPY = pg_catalog.english);
    ALTER TEXT SEARCH CONFIGURATION evalrl_unstemmed ALTER MAPPING REPLACE english_stem WITH evalrl_unstemmed;

    -- What ingest indexes for an email: subject (A) and body (B) stemmed, plus the unstemmed forms (D).
    CREATE FUNCTION evalrl_search_vector(subject text, body text) RETURNS tsvector
      LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT stemmed || setweight(ts_delete(unstemmed, tsvector_to_array(stemmed)), 'D')
        FROM (SELECT setweight(to_tsvector('english', s), 'A') || setweight(to_tsvector('english', b), 'B') AS stemmed,
                     to_tsvector('evalrl_unstemmed', s || ' ' || b) AS unstemmed
              FROM (SELECT evalrl_search_text(subject) AS s, evalrl_search_text(left(body, 100000)) AS b) AS t) AS v
      $$;

    UPDATE mailbox_messages m SET tsv = evalrl_search_vector(e.subject, e.body)
    FROM emails e WHERE e.id = m.email_id;
  `,
};
