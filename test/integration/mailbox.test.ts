import fs from 'node:fs';
import path from 'node:path';
import { createPool } from '../../src/db/pool';
import { givesAwayAnswer } from '../../src/mail/question';
import { storeBatch } from '../../src/store/ingest';
import { mailboxOf, readEmail, searchEmails } from '../../src/store/mailbox';
import { MessageHandles, runEmailTool } from '../../src/env/emailTools';
import { cli, stackConfig, tempDataDir, TEST_STACK_ENV } from './testStack';

jest.setTimeout(180_000);

const MAILDIR = TEST_STACK_ENV.EVALRL_MAILDIR;
const EXPECTED_PER_INBOX = {
  'allen-p': 153,
  'carson-m': 304,
  'guzman-m': 235,
  'motley-m': 296,
  'rapp-b': 263,
  'stokley-c': 508,
  'whalley-g': 436,
};
const pool = createPool(stackConfig());
const filesUnder = (dir: string): string[] =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    return e.isDirectory() ? filesUnder(full) : [full];
  });
const ingestJson = async (...args: string[]) => JSON.parse((await cli(['ingest', ...args, '--json'])).stdout);

beforeAll(async () => {
  await ingestJson(MAILDIR);
  await cli(['questions', 'generate']);
});
afterAll(() => pool.end());

describe('ingest', () => {
  it('stores every real email exactly once, in its owner inbox, and accounts for every file', async () => {
    const { rows } = await pool.query(
      `SELECT inbox_id, count(*)::int AS n FROM mailbox_messages GROUP BY 1 ORDER BY 1`,
    );
    expect(Object.fromEntries(rows.map((r) => [r.inbox_id, r.n]))).toEqual(EXPECTED_PER_INBOX);
    const files = filesUnder(MAILDIR);
    expect(files).toHaveLength(2195);
    const ledger = await pool.query(
      `SELECT status, count(*)::int AS n FROM ingest_sources WHERE source_file = ANY($1) GROUP BY 1`,
      [files],
    );
    expect(ledger.rows).toEqual([{ status: 'stored', n: 2195 }]); // no file silently lost
    const inbox = await pool.query(`SELECT address FROM inboxes WHERE id = 'allen-p'`);
    expect(inbox.rows[0].address).toBe('phillip.allen@enron.com');
  });

  it('adds nothing when the same files are ingested again', async () => {
    const before = (await pool.query('SELECT count(*)::int AS n FROM emails')).rows[0].n;
    const report = await ingestJson(MAILDIR);
    expect(report).toMatchObject({
      read: 2195,
      alreadyIngested: 2195,
      stored: 0,
      duplicates: 0,
      rejected: 0,
    });
    expect((await pool.query('SELECT count(*)::int AS n FROM emails')).rows[0].n).toBe(before);
  });

  it('skips and reports corrupt files without losing the good ones, and links duplicates to their new owner', async () => {
    const dir = tempDataDir('evalrl-badmail-');
    const user = path.join(dir, 'broken-x', 'inbox');
    fs.mkdirSync(user, { recursive: true });
    const real = fs.readFileSync(path.join(MAILDIR, 'allen-p/_sent_mail/601.'));
    fs.writeFileSync(path.join(user, '1.'), '');
    fs.writeFileSync(path.join(user, '2.'), Buffer.from([0xff, 0x00, 0x13, 0x37, 0x00, 0x42]));
    fs.writeFileSync(path.join(user, '3.'), real.toString('latin1').replace(/^Message-ID:.*\r?\n/m, ''));
    fs.writeFileSync(path.join(user, '4.'), real); // same Message-ID as an allen-p email
    fs.writeFileSync(
      path.join(user, '5.'),
      'Message-ID: <fresh.1@evalrl>\nDate: Mon, 1 Jan 2001 10:00:00 -0600\nFrom: x@enron.com\nTo: y@enron.com\nSubject: fresh\n\nfresh body\n',
    );
    const report = await ingestJson(path.join(dir));
    expect(report).toMatchObject({ read: 5, stored: 1, duplicates: 1, rejected: 3 });
    expect(report.rejects.map((r: { source: string }) => path.basename(r.source))).toEqual([
      '1.',
      '2.',
      '3.',
    ]);
    expect(report.rejects[2].reason).toMatch(/Message-ID/);
    const scope = { inbox: 'broken-x' };
    expect(await readEmail(pool, scope, '<9400496.1075855729384.JavaMail.evans@thyme>')).not.toBeNull();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('rejects poison messages one by one, stores every good one beside them, and resumes exactly', async () => {
    const dir = tempDataDir('evalrl-poison-');
    const inbox = path.join(dir, 'maildir', 'poison-x', 'inbox');
    fs.mkdirSync(inbox, { recursive: true });
    const mail = (id: string, headers = '', body = 'body') =>
      `Message-ID: <${id}@evalrl>\nDate: Mon, 1 Jan 2001 10:00:00 -0600\nFrom: x@enron.com\nTo: y@enron.com\nSubject: ${id}\n${headers}\n${body}\n`;
    fs.writeFileSync(path.join(inbox, '1.'), mail('poison.good1'));
    fs.writeFileSync(
      path.join(inbox, '2.'),
      mail('poison.nul').replace('Subject: poison.nul', 'Subject: a\0b'),
    );
    fs.writeFileSync(path.join(inbox, '3.'), mail('x'.repeat(5000)));
    fs.writeFileSync(path.join(inbox, '4.'), mail('poison.huge', '', 'y'.repeat(26 * 2 ** 20)));
    fs.writeFileSync(path.join(inbox, '5.'), mail('poison.good2'));
    const longSubject = mail('poison.long').replace(
      'Subject: poison.long',
      `Subject: ${'long '.repeat(250).replace(/ /g, '\n ')}`,
    );
    fs.writeFileSync(path.join(inbox, '6.'), longSubject); // 1,250 characters after unfolding, short lines
    const first = await ingestJson(path.join(dir, 'maildir'));
    expect(first).toMatchObject({ read: 6, stored: 4, rejected: 2 });
    expect(first.rejects.map((r: { reason: string }) => r.reason)).toEqual([
      expect.stringMatching(/^messageId: longer than 998/),
      expect.stringMatching(/over the 26214400-byte cap/),
    ]);
    // A NUL in a subject or a subject over a mail line costs the field, not the message: noted in the ledger.
    expect(first.notes).toEqual([
      { source: path.join(inbox, '2.'), note: 'subject: 1 NUL character stripped' },
      {
        source: path.join(inbox, '6.'),
        note: expect.stringMatching(/^subject: truncated from \d+ to 998 characters$/),
      },
    ]);
    expect((await readEmail(pool, { inbox: 'poison-x' }, '<poison.nul@evalrl>'))?.subject).toBe('ab');
    expect((await readEmail(pool, { inbox: 'poison-x' }, '<poison.long@evalrl>'))?.subject).toHaveLength(998);
    const noted = await pool.query(`SELECT status, reason FROM ingest_sources WHERE source_file = $1`, [
      path.join(inbox, '2.'),
    ]);
    expect(noted.rows).toEqual([{ status: 'stored', reason: 'subject: 1 NUL character stripped' }]);

    // A date no calendar holds (a year before 4713 BC) is refused where it is parsed, naming the field.
    const jsonl = path.join(dir, 'mail.jsonl');
    const line = (id: string, date = '2001-02-03T00:00:00Z') =>
      JSON.stringify({ messageId: `<${id}@evalrl>`, from: { address: 'x@enron.com' }, date, body: id });
    fs.writeFileSync(
      jsonl,
      [line('pj.1'), line('pj.bad', '-005000-01-01T00:00:00Z'), line('pj.2')].join('\n'),
    );
    const json = await ingestJson(jsonl, '--inbox', 'poison-j');
    expect(json).toMatchObject({ read: 3, stored: 2, rejected: 1 });
    expect(json.rejects[0]).toMatchObject({ source: `${jsonl}:2`, reason: expect.stringMatching(/^date: /) });

    // 8-bit mbox content reaches the MIME parser as bytes: its charset decodes it.
    const mbox = path.join(dir, 'latin1.mbox');
    const latin1 = mail('poison.latin1', 'Content-Type: text/plain; charset=iso-8859-1\n', 'caf\xe9');
    fs.writeFileSync(mbox, Buffer.from(`From x@enron.com Mon Jan  1 10:00:00 2001\n${latin1}`, 'latin1'));
    expect(await ingestJson(mbox, '--inbox', 'poison-m')).toMatchObject({ stored: 1, rejected: 0 });
    expect((await readEmail(pool, { inbox: 'poison-m' }, '<poison.latin1@evalrl>'))?.body).toContain('café');

    const again = await ingestJson(path.join(dir, 'maildir'));
    expect(again).toMatchObject({ read: 6, alreadyIngested: 6, stored: 0, rejected: 0 });
    const ledger = await pool.query(
      `SELECT status, count(*)::int AS n FROM ingest_sources WHERE inbox_id IN ('poison-x', 'poison-j') GROUP BY 1 ORDER BY 1`,
    );
    expect(ledger.rows).toEqual([
      { status: 'rejected', n: 3 },
      { status: 'stored', n: 6 },
    ]);
    for (const id of ['<poison.good1@evalrl>', '<poison.good2@evalrl>'])
      expect(await readEmail(pool, { inbox: 'poison-x' }, id)).not.toBeNull();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('retries a transient database error instead of rejecting the message it struck', async () => {
    const dir = tempDataDir('evalrl-transient-');
    const jsonl = path.join(dir, 'mail.jsonl');
    const line = (id: string, date = '2001-02-03T00:00:00Z') =>
      JSON.stringify({ messageId: `<${id}@evalrl>`, from: { address: 'x@enron.com' }, date, body: id });
    fs.writeFileSync(jsonl, [line('tr.1'), line('tr.bad'), line('tr.flaky')].join('\n'));
    // PostgreSQL refuses <tr.bad> (a data exception, SQLSTATE 22003: its batch is stored one by one and it alone
    // is rejected), and <tr.flaky> meets a serialization failure (40001) on its first two inserts.
    await pool.query(`
      CREATE SEQUENCE evalrl_test_flaky;
      CREATE FUNCTION evalrl_test_flaky() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.message_id = '<tr.bad@evalrl>' THEN
          RAISE EXCEPTION 'value out of range (injected)' USING ERRCODE = '22003';
        END IF;
        IF NEW.message_id = '<tr.flaky@evalrl>' AND nextval('evalrl_test_flaky') <= 2 THEN
          RAISE EXCEPTION 'could not serialize access (injected)' USING ERRCODE = '40001';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER evalrl_test_flaky BEFORE INSERT ON emails FOR EACH ROW EXECUTE FUNCTION evalrl_test_flaky();`);
    try {
      const report = await ingestJson(jsonl, '--inbox', 'transient-j');
      expect(report).toMatchObject({ read: 3, stored: 2, rejected: 1 });
      expect(report.rejects).toEqual([
        { source: `${jsonl}:2`, reason: expect.stringMatching(/^not storable: /) },
      ]);
      expect(await readEmail(pool, { inbox: 'transient-j' }, '<tr.flaky@evalrl>')).not.toBeNull();
    } finally {
      await pool.query(`
        DROP TRIGGER evalrl_test_flaky ON emails; DROP FUNCTION evalrl_test_flaky(); DROP SEQUENCE evalrl_test_flaky;`);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("keeps each inbox its own copy of a shared Message-ID: no reading, no replacing another inbox's mail", async () => {
    const dir = tempDataDir('evalrl-identity-');
    const write = (inbox: string, body: string, extra = '') => {
      fs.mkdirSync(path.join(dir, inbox, 'inbox'), { recursive: true });
      fs.writeFileSync(
        path.join(dir, inbox, 'inbox', '1.'),
        `Message-ID: <shared.1@evalrl>\nDate: Mon, 1 Jan 2001 10:00:00 -0600\nFrom: x@enron.com\nTo: y@enron.com\n${extra}Subject: plan\n\n${body}\n`,
      );
    };
    write('ident-a', 'the secret plan', 'Bcc: hidden@enron.com\n'); // the sender's copy: with its Bcc
    write('ident-b', 'a forged copy'); // later, another inbox, the same Message-ID
    write('ident-c', 'the secret plan', 'Bcc: hidden@enron.com\n'); // the very same copy
    const report = await ingestJson(dir);
    expect(report).toMatchObject({ read: 3, stored: 2, duplicates: 1, rejected: 0 });
    const a = await readEmail(pool, { inbox: 'ident-a' }, '<shared.1@evalrl>');
    const b = await readEmail(pool, { inbox: 'ident-b' }, '<shared.1@evalrl>');
    expect(a).toMatchObject({ body: expect.stringContaining('the secret plan'), bcc: ['hidden@enron.com'] });
    expect(b).toMatchObject({ body: expect.stringContaining('a forged copy'), bcc: [] });
    expect(await readEmail(pool, { inbox: 'ident-c' }, '<shared.1@evalrl>')).toEqual(a);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('stores batches two at a time and still keeps the oldest copy of a duplicate, and every reject in order', async () => {
    const dir = tempDataDir('evalrl-turns-');
    const jsonl = path.join(dir, 'mail.jsonl');
    const line = (id: string) =>
      JSON.stringify({
        messageId: `<${id}@evalrl>`,
        from: { address: 'x@enron.com' },
        date: '2001-02-03',
        body: id,
      });
    // One message per batch: each copy of <turn.dup> is in a batch stored beside the one before it.
    const lines = [1, 2, 3, 4, 5, 6].flatMap((i) => [
      line('turn.dup'),
      line(`turn.${i}`),
      '{"messageId": ""}',
    ]);
    fs.writeFileSync(jsonl, lines.join('\n'));
    const report = await ingestJson(jsonl, '--inbox', 'turns-x', '--batch-size', '1');
    expect(report).toMatchObject({ read: 18, stored: 7, duplicates: 5, rejected: 6 });
    expect(report.rejects.map((r: { source: string }) => r.source)).toEqual(
      [3, 6, 9, 12, 15, 18].map((n) => `${jsonl}:${n}`),
    );
    const dup = await pool.query(`SELECT source_file FROM emails WHERE message_id = '<turn.dup@evalrl>'`);
    expect(dup.rows).toEqual([{ source_file: `${jsonl}:1` }]);
    fs.rmSync(dir, { recursive: true, force: true });

    // The ordering itself: a batch whose turn has not come waits, even when it was started first.
    const parsed = (source: string) => ({
      inbox: 'turns-y',
      folder: 'inbox',
      source,
      ok: true as const,
      email: {
        messageId: '<turn.wait@evalrl>',
        subject: '',
        from: { address: 'x@enron.com', name: '' },
        date: new Date('2001-02-03'),
        to: [],
        cc: [],
        bcc: [],
        body: 'b',
      },
    });
    let firstInserted!: () => void;
    const second = storeBatch(pool, [parsed('wait/2')], {
      after: new Promise((resolve) => (firstInserted = resolve)),
      done: () => undefined,
    });
    await new Promise((resolve) => setTimeout(resolve, 1000)); // a second batch that did not wait is stored by now
    const first = storeBatch(pool, [parsed('wait/1')], {
      after: Promise.resolve(),
      done: () => firstInserted(),
    });
    expect((await Promise.all([first, second])).map((c) => c.stored)).toEqual([1, 0]);
    const owner = await pool.query(`SELECT source_file FROM emails WHERE message_id = '<turn.wait@evalrl>'`);
    expect(owner.rows).toEqual([{ source_file: 'wait/1' }]);
  });

  it('ingests mbox and JSONL files, reporting bad JSONL lines by line number', async () => {
    const dir = tempDataDir('evalrl-mbox-');
    const mbox = path.join(dir, 'mail.mbox');
    const msg = (id: number) =>
      `From x@enron.com Mon Jan  1 10:00:00 2001\nMessage-ID: <mbox.${id}@evalrl>\nDate: Mon, 1 Jan 2001 10:00:00 -0600\nFrom: x@enron.com\nTo: owner@enron.com\nSubject: mbox ${id}\n\n>From the desk of x: line ${id}\n`;
    fs.writeFileSync(mbox, [1, 2, 3].map(msg).join('\n'));
    expect(await ingestJson(mbox, '--inbox', 'mbox-u')).toMatchObject({ read: 3, stored: 3, rejected: 0 });
    const mail = await readEmail(pool, { inbox: 'mbox-u' }, '<mbox.2@evalrl>');
    expect(mail?.body).toContain('From the desk of x: line 2');

    const jsonl = path.join(dir, 'mail.jsonl');
    const good = {
      messageId: '<j.1@evalrl>',
      subject: 'json',
      from: { address: 'x@enron.com' },
      date: '2001-02-03T00:00:00Z',
      body: 'b',
      to: [{ address: 'owner@enron.com' }],
    };
    fs.writeFileSync(
      jsonl,
      [JSON.stringify(good), '{not json', JSON.stringify({ ...good, messageId: '' })].join('\n'),
    );
    const report = await ingestJson(jsonl, '--inbox', 'jsonl-u');
    expect(report).toMatchObject({ read: 3, stored: 1, rejected: 2 });
    expect(report.rejects.map((r: { source: string }) => r.source)).toEqual([`${jsonl}:2`, `${jsonl}:3`]);
    await expect(cli(['ingest', jsonl])).rejects.toMatchObject({
      stderr: expect.stringMatching(/--inbox is required/),
    });
    await expect(cli(['ingest', path.join(dir, 'missing')])).rejects.toMatchObject({
      stderr: expect.stringMatching(/no such file or folder/),
    });
    fs.rmSync(dir, { recursive: true, force: true });
  });
});

describe('search_emails and read_email', () => {
  it('gives two different emails of one inbox sharing a Message-ID two handles, each read as itself', async () => {
    const dir = tempDataDir('evalrl-shadow-');
    const jsonl = path.join(dir, 'mail.jsonl');
    const line = (subject: string, body: string) =>
      JSON.stringify({
        messageId: '<shadow@evalrl>',
        subject,
        from: { address: 'x@enron.com' },
        date: '2001-02-03T00:00:00Z',
        body,
      });
    fs.writeFileSync(
      jsonl,
      [line('shadow one', 'zebrafinch first'), line('shadow two', 'zebrafinch second')].join('\n'),
    );
    expect(await ingestJson(jsonl, '--inbox', 'shadow-u')).toMatchObject({ stored: 2 });
    const handles = new MessageHandles();
    const limits = { searchHits: 10, bodyChars: 1000 };
    const scope = { inbox: 'shadow-u' };
    const search = await runEmailTool(
      mailboxOf(pool),
      scope,
      'search_emails',
      { keywords: ['zebrafinch'] },
      limits,
      handles,
    );
    expect(search).toMatchObject({ searchedIds: ['<shadow@evalrl>', '<shadow@evalrl>'] });
    const found = search.kind === 'result' ? search.content.split('\n').map((l) => l.split(' | ')[0]) : [];
    expect(found).toEqual(['m1', 'm2']);
    const bodies = [];
    for (const handle of found) {
      const read = await runEmailTool(
        mailboxOf(pool),
        scope,
        'read_email',
        { message_id: handle },
        limits,
        handles,
      );
      expect(read).toMatchObject({
        readId: '<shadow@evalrl>',
        content: expect.stringContaining(`id: ${handle}\n`),
      });
      bodies.push(read.kind === 'result' ? /zebrafinch \w+/.exec(read.content)?.[0] : '');
    }
    expect(bodies.sort()).toEqual(['zebrafinch first', 'zebrafinch second']);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const allen = { inbox: 'allen-p' };

  it('finds known emails, ranked, with highlighted snippets', async () => {
    const hits = await searchEmails(pool, allen, { keywords: ['tenant', 'lease', 'deposit'] });
    expect(hits.map((h) => h.message_id).sort()).toEqual([
      '<1820733.1075855707677.JavaMail.evans@thyme>',
      '<9400496.1075855729384.JavaMail.evans@thyme>',
    ]);
    expect(hits[0]).toMatchObject({ from: 'phillip.allen@enron.com', date: '2000-12-14T14:33:00.000Z' });
    expect(hits[0].snippet).toMatch(/\*\*(lease|tenant|deposit)\*\*/i);
    const mariner = await searchEmails(
      pool,
      { inbox: 'whalley-g' },
      { keywords: ['Mariner'], from: 'kcashiola@mariner-energy.com' },
    );
    expect([...new Set(mariner.map((h) => h.subject))].sort()).toEqual([
      'Mariner Energy, Inc. - Press Release',
      'News Release - Mariner Energy, Inc.',
    ]);
  });

  it('requires every keyword and applies the sender, recipient, date and limit filters', async () => {
    expect(await searchEmails(pool, allen, { keywords: ['tenant', 'zzyzxnotaword'] })).toEqual([]);
    const hits = await searchEmails(pool, allen, {
      keywords: ['lease'],
      to: 'stagecoachmama@hotmail.com',
      limit: 10,
    });
    expect(hits.length).toBeGreaterThan(0);
    for (const hit of hits) {
      const mail = await readEmail(pool, allen, hit.message_id);
      expect([...mail!.to, ...mail!.cc, ...mail!.bcc]).toContain('stagecoachmama@hotmail.com');
    }
    expect(
      await searchEmails(pool, allen, { keywords: ['lease'], sent_before: '2000-12-14' }),
    ).not.toContainEqual(
      expect.objectContaining({ message_id: '<9400496.1075855729384.JavaMail.evans@thyme>' }),
    );
    expect(await searchEmails(pool, allen, { keywords: [], limit: 3 })).toHaveLength(3);
    await expect(searchEmails(pool, allen, { keywords: ['x'], limit: 11 })).rejects.toThrow(/limit/);
  });

  it('puts emails holding a keyword as written before those that match only its stem', async () => {
    // "rent" is its own stem: an email with only "rented" or "rents" holds the stem, not the word as written.
    for (const word of ['leased', 'changed', 'deposits', 'rent']) {
      const hits = await searchEmails(pool, allen, { keywords: [word], limit: 10 });
      const asWritten = [];
      for (const hit of hits) {
        const mail = await readEmail(pool, allen, hit.message_id);
        asWritten.push(new RegExp(`\\b${word}\\b`, 'i').test(`${mail!.subject} ${mail!.body}`));
      }
      expect(new Set(asWritten)).toEqual(new Set([true, false])); // both kinds were found: stems still match
      expect(`${word}: ${asWritten.join(' ')}`).toBe(
        `${word}: ${[...asWritten].sort((a, b) => Number(b) - Number(a)).join(' ')}`,
      );
    }
  });

  it('tells a word as written from another word with the same stem ("notion" is not in "notional")', async () => {
    const { rows } = await pool.query(
      `SELECT evalrl_search_vector('', body) @@ evalrl_as_written(plainto_tsquery('evalrl_unstemmed', 'notion')) AS written,
              evalrl_search_vector('', body) @@ plainto_tsquery('english', 'notion') AS stem
       FROM unnest(ARRAY['the notional amount', 'a notion of value']) AS body`,
    );
    expect(rows).toEqual([
      { written: false, stem: true },
      { written: true, stem: true },
    ]);
  });

  it('hides mail dated after the question (the scope’s query date)', async () => {
    const early = { inbox: 'allen-p', queryDate: new Date('2000-12-14T00:00:00Z') };
    expect(await searchEmails(pool, early, { keywords: ['tenant', 'lease'] })).toEqual([]);
    expect(await readEmail(pool, early, '<9400496.1075855729384.JavaMail.evans@thyme>')).toBeNull();
  });

  it('never shows one inbox the mail of another', async () => {
    const allenOnly = '<9400496.1075855729384.JavaMail.evans@thyme>';
    expect(await readEmail(pool, allen, allenOnly)).toMatchObject({ to: ['stagecoachmama@hotmail.com'] });
    expect(await readEmail(pool, { inbox: 'carson-m' }, allenOnly)).toBeNull();
    expect(
      await searchEmails(pool, { inbox: 'carson-m' }, { keywords: ['tenant', 'lease', 'deposit'] }),
    ).toEqual([]);
    expect(await searchEmails(pool, { inbox: 'no-such-inbox' }, { keywords: ['lease'] })).toEqual([]);
  });

  it('treats hostile keywords as data', async () => {
    const hostile = [
      ["'; DROP TABLE emails; --"],
      ['lease & !tenant | (rent'],
      ['"unterminated', "it's"],
      ['', '   '],
      ['\u0000', '\\', '%', '_', ':*'],
      ['<->', '!!', '&&'],
    ];
    for (const keywords of hostile)
      await expect(searchEmails(pool, allen, { keywords })).resolves.toBeInstanceOf(Array);
    const quoted = await searchEmails(pool, allen, { keywords: ['"lease"', 'tenant!'] });
    expect(quoted.length).toBeGreaterThan(0);
    expect((await pool.query('SELECT count(*)::int AS n FROM emails')).rows[0].n).toBeGreaterThan(2000);
  });
});

describe('questions', () => {
  it('are answerable: their gold emails exist and are readable from their inbox before the query date', async () => {
    const { rows } = await pool.query(
      `SELECT id, inbox_id, message_ids, query_date, question, answer, source, split FROM questions WHERE inbox_id = ANY($1)`,
      [Object.keys(EXPECTED_PER_INBOX)],
    );
    expect(rows.length).toBeGreaterThan(1000);
    expect(new Set(rows.map((r) => r.split))).toEqual(new Set(['train', 'test']));
    for (const inbox of Object.keys(EXPECTED_PER_INBOX)) {
      expect(new Set(rows.filter((r) => r.inbox_id === inbox).map((r) => r.split)).size).toBe(1); // split by inbox
    }
    // On real mail some emails state the day they were sent: no question may hand its answer over.
    expect(rows.filter((r) => givesAwayAnswer(r)).map((r) => r.question)).toEqual([]);
    for (const q of rows.filter((_, i) => i % 7 === 0)) {
      for (const id of q.message_ids) {
        const mail = await readEmail(pool, { inbox: q.inbox_id, queryDate: q.query_date }, id);
        expect(mail).not.toBeNull();
        const kind = q.source.replace(/^template:/, '');
        if (/^(who_sent|who_mentioned)/.test(kind)) expect(mail!.from).toBe(q.answer);
        if (/^(amount|stated_date)/.test(kind)) expect(mail!.body.replace(/\s+/g, ' ')).toContain(q.answer);
        if (/_topic$|_by_sender$|^who_mentioned$/.test(kind))
          expect(q.question).not.toContain(`"${mail!.subject}"`);
      }
    }
  });

  it('regenerating adds nothing', async () => {
    await cli(['questions', 'generate']);
    const report = JSON.parse((await cli(['questions', 'generate', '--json'])).stdout);
    expect(report.generated).toBeGreaterThan(0);
    expect(report.inserted).toBe(0);
  });
});
