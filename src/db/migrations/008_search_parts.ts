export const searchParts = {
  version: 8,
  name: 'search_parts',
  sql: `
    -- The words inside addresses, host names and URLs are searchable on their own. PostgreSQL's english
    -- parser keeps "bill.rapp@enron.com" or "www.site.co.uk/page" as one token, so "rapp" or "site" found
    -- nothing (SQLite FTS5's unicode61 tokenizer splits them). Documents and queries both pass through this
    -- function: separators become spaces, so a whole address still matches (as all of its parts).
    CREATE FUNCTION evalrl_search_text(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
      AS $$ SELECT regexp_replace(t, '[@./:_=?&#%+~-]+', ' ', 'g') $$;

    UPDATE mailbox_messages m
    SET tsv = setweight(to_tsvector('english', evalrl_search_text(e.subject)), 'A')
           || setweight(to_tsvector('english', evalrl_search_text(left(e.body, 100000))), 'B')
    FROM emails e WHERE e.id = m.email_id;
  `,
};
