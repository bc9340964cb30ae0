import fs from 'node:fs';
import path from 'node:path';
import { MAX_MESSAGE_BYTES, type RawMessage } from './email';

export type MailFormat = 'maildir' | 'mbox' | 'jsonl';

export interface ReadOptions {
  /** Longest line read (bytes, default MAX_MESSAGE_BYTES): a longer one is skipped unread and reported. */
  maxLineBytes?: number;
}

/** A line of a file: its text, or (`over`) only its length in bytes when it is over the limit. */
export type Line = { n: number; text: string } | { n: number; over: number };

/**
 * Reads a file's lines (split at \n, a trailing \r dropped) holding at most `maxBytes` of one line in memory:
 * a longer line is passed over and yields only its size, so a line of any length (over V8's ~512 Mi-character
 * string limit too) costs neither a crash nor more memory. Lines are numbered from 1.
 */
export async function* readLines(
  file: string,
  encoding: BufferEncoding,
  maxBytes: number,
): AsyncGenerator<Line> {
  let parts: Buffer[] = [];
  let bytes = 0; // of the current line, counted even when it is over the limit and not kept
  let n = 0;
  const end = (): Line => {
    n++;
    const line: Line =
      bytes > maxBytes
        ? { n, over: bytes }
        : { n, text: Buffer.concat(parts).toString(encoding).replace(/\r$/, '') };
    parts = [];
    bytes = 0;
    return line;
  };
  for await (const chunk of fs.createReadStream(file) as AsyncIterable<Buffer>) {
    let start = 0;
    for (let nl = chunk.indexOf(10, start); nl !== -1; nl = chunk.indexOf(10, start)) {
      bytes += nl - start;
      if (bytes <= maxBytes) parts.push(chunk.subarray(start, nl));
      yield end();
      start = nl + 1;
    }
    if (start < chunk.length) {
      bytes += chunk.length - start;
      if (bytes <= maxBytes) parts.push(chunk.subarray(start));
      else parts = [];
    }
  }
  if (bytes > 0 || parts.length > 0) yield end();
}

/**
 * Enron maildir in the CMU layout, `<user>/<folder>[/<subfolder>…]/<n>.`: the user is the owner inbox.
 * PATH may be the root holding the users, or one user's folder (then `inbox` names it).
 */
export async function* readMaildir(root: string, inbox?: string): AsyncGenerator<RawMessage> {
  const users = inbox
    ? [{ user: inbox, dir: root }]
    : listDirs(root).map((user) => ({ user, dir: path.join(root, user) }));
  for (const { user, dir } of users) {
    for await (const file of walkFiles(dir)) {
      const folder = path.relative(dir, path.dirname(file)).split(path.sep).join('/');
      const { size } = await fs.promises.stat(file);
      yield size > MAX_MESSAGE_BYTES
        ? { inbox: user, folder, source: file, oversize: size }
        : { inbox: user, folder, source: file, raw: await fs.promises.readFile(file) };
    }
  }
}

/**
 * An mbox file (messages start at lines beginning `From `; `>From ` unquoted as in mboxrd). Read as latin1,
 * one char per byte, so 8-bit content reaches the MIME parser as the bytes it was (its charset decodes them).
 */
export async function* readMbox(
  file: string,
  inbox: string,
  options: ReadOptions = {},
): AsyncGenerator<RawMessage> {
  const maxLine = options.maxLineBytes ?? MAX_MESSAGE_BYTES;
  let lines: string[] = [];
  let bytes = 0;
  let index = 0;
  let longLine: { n: number; over: number } | undefined;
  const flush = (): RawMessage => {
    const origin = { inbox, folder: path.basename(file), source: `${file}#${index++}` };
    const message: RawMessage = longLine
      ? {
          ...origin,
          oversize: bytes,
          reason: `line ${longLine.n} is ${longLine.over} bytes, over the ${maxLine}-byte line limit`,
        }
      : bytes > MAX_MESSAGE_BYTES
        ? { ...origin, oversize: bytes }
        : { ...origin, raw: Buffer.from(lines.join('\n'), 'latin1') };
    lines = [];
    bytes = 0;
    longLine = undefined;
    return message;
  };
  for await (const read of readLines(file, 'latin1', maxLine)) {
    if ('over' in read) {
      longLine ??= read;
      bytes += read.over + 1;
      continue;
    }
    const line = read.text;
    if (line.startsWith('From ')) {
      if (bytes > 0) yield flush();
      continue;
    }
    bytes += line.length + 1;
    if (bytes <= MAX_MESSAGE_BYTES && !longLine) lines.push(/^>+From /.test(line) ? line.slice(1) : line);
  }
  if (bytes > 0) yield flush();
}

/** JSONL, one email object per line (see emailSchema); a line that is not JSON is passed on as text for the report. */
export async function* readJsonl(
  file: string,
  inbox: string,
  options: ReadOptions = {},
): AsyncGenerator<RawMessage> {
  const maxLine = options.maxLineBytes ?? MAX_MESSAGE_BYTES;
  for await (const read of readLines(file, 'utf8', maxLine)) {
    const origin = { inbox, folder: path.basename(file), source: `${file}:${read.n}` };
    if ('over' in read) {
      // Recorded as rejected under its line number, so a resume skips it unread.
      yield {
        ...origin,
        oversize: read.over,
        reason: `line ${read.n} is ${read.over} bytes, over the ${maxLine}-byte line limit`,
      };
      continue;
    }
    const line = read.text;
    if (line.trim() === '') continue;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch {
      json = { invalidJson: line.slice(0, 80) };
    }
    yield { ...origin, json, bytes: line.length };
  }
}

export function detectFormat(target: string): MailFormat {
  if (fs.statSync(target).isDirectory()) return 'maildir';
  return target.endsWith('.jsonl') || target.endsWith('.ndjson') ? 'jsonl' : 'mbox';
}

export function readMessages(
  target: string,
  format: MailFormat,
  inbox?: string,
  options: ReadOptions = {},
): AsyncGenerator<RawMessage> {
  if (format === 'maildir') return readMaildir(target, inbox);
  if (!inbox)
    throw new Error(`--inbox is required for ${format} input (${target}): name the mailbox that owns it`);
  return format === 'mbox' ? readMbox(target, inbox, options) : readJsonl(target, inbox, options);
}

function listDirs(dir: string): string[] {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
}

async function* walkFiles(dir: string): AsyncGenerator<string> {
  const entries = (await fs.promises.readdir(dir, { withFileTypes: true })).sort((a, b) =>
    a.name.localeCompare(b.name),
  );
  for (const entry of entries) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) yield* walkFiles(full);
    else if (entry.isFile()) yield full;
  }
}
