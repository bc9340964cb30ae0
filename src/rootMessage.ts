/** The innermost message of an error chain: a Temporal failure wraps the activity's own error in causes. */
export function rootMessage(err: unknown): string {
  let e = err as { message?: string; cause?: unknown };
  while (e.cause instanceof Error) e = e.cause as typeof e;
  return e.message ?? String(err);
}
