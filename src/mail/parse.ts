import PostalMime from 'postal-mime';
import {
  emailSchema,
  MAX_MESSAGE_BYTES,
  repairEmail,
  type Address,
  type ParseResult,
  type RawMessage,
} from './email';

type PostalAddress = { address?: string; name?: string; group?: PostalAddress[] };

/** Flattens groups and lower-cases addresses so that search filters compare like with like. */
function addresses(list: PostalAddress[] | PostalAddress | undefined): Address[] {
  const items = list === undefined ? [] : Array.isArray(list) ? list : [list];
  return items.flatMap((a) =>
    a.group
      ? addresses(a.group)
      : a.address
        ? [{ address: a.address.toLowerCase(), name: a.name ?? '' }]
        : [],
  );
}

/** Parses one message (RFC 822 via postal-mime, or a JSONL object); a bad message yields a reason, never a throw. */
export async function parseMessage(message: RawMessage): Promise<ParseResult> {
  const origin = { inbox: message.inbox, folder: message.folder, source: message.source };
  if ('oversize' in message)
    return {
      ...origin,
      ok: false,
      reason: message.reason ?? `${message.oversize} bytes, over the ${MAX_MESSAGE_BYTES}-byte cap`,
    };
  try {
    const candidate = 'json' in message ? message.json : await parseRfc822(message.raw);
    const notes = repairEmail(candidate);
    const parsed = emailSchema.safeParse(candidate);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return { ...origin, ok: false, reason: `${issue.path.join('.') || 'email'}: ${issue.message}` };
    }
    return { ...origin, ok: true, email: parsed.data, ...(notes.length ? { notes } : {}) };
  } catch (err) {
    return { ...origin, ok: false, reason: `unparseable: ${(err as Error).message}` };
  }
}

async function parseRfc822(raw: Uint8Array) {
  const mail = await PostalMime.parse(raw);
  if (mail.headers.length === 0) throw new Error('no headers');
  const from = addresses(mail.from as PostalAddress | undefined)[0];
  return {
    messageId: mail.messageId ?? '',
    subject: mail.subject ?? '',
    from: from ?? { address: '', name: '' },
    date: mail.date ?? '',
    to: addresses(mail.to as PostalAddress[] | undefined),
    cc: addresses(mail.cc as PostalAddress[] | undefined),
    bcc: addresses(mail.bcc as PostalAddress[] | undefined),
    body: mail.text ?? '',
  };
}
