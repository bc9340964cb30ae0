export const searchVectorOnce = {
  version: 12,
  name: 'search_vector_once',
  sql: `
    -- The same vector as migration 011's, computed once per email. As a SQL function, its subqueries were
    -- flattened into the outer expression, so each email's body was parsed into a stemmed vector twice:
    -- ingest fell from 1,284 to 702 emails/s at 500k. PL/pgSQL variables hold each part once.
    CREATE OR REPLACE FUNCTION evalrl_search_vector(subject text, body text) RETURNS tsvector
      LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
        DECLARE
          s text := evalrl_search_text(subject);
          b text := evalrl_search_text(left(body, 100000));
          stemmed tsvector := setweight(to_tsvector('english', s), 'A') || setweight(to_tsvector('english', b), 'B');
        BEGIN
          RETURN stemmed
            || setweight(ts_delete(to_tsvector('evalrl_unstemmed', s || ' ' || b), tsvector_to_array(stemmed)), 'D');
        END
      $$;
  `,
};
