import { redact } from '../redact';

/** Prints a result as JSON (--json, for scripts) or as the given human-readable lines. */
export function print(json: boolean, value: unknown, human: () => string[]) {
  console.log(json ? JSON.stringify(value, null, 2) : human().join('\n'));
}

/** Failures print one line saying what went wrong (and, where known, what to do) and exit 1. */
export function fail(err: unknown): never {
  console.error(`evalrl: ${redact(err instanceof Error ? err.message : String(err))}`);
  process.exit(1);
}
