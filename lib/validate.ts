import { ThrottleConfigError } from './errors.js';
import { describe } from './rules.js';

/**
 * Validation at the library's boundary: every failure is a `ThrottleConfigError` that says what was
 * expected and names the argument (its `argument`).
 */

/** The argument a check's `what` names, its last word: `'axios option retries'` → `'retries'`, `'pause ms'` → `'ms'`. */
export function argumentOf(what: string): string {
  return what.slice(what.lastIndexOf(' ') + 1);
}

export function checkDelay(what: string, value: unknown): number {
  if (typeof value !== 'number' || Number.isNaN(value) || value < 0) {
    throw new ThrottleConfigError(`Expected ${what} to be a number of ms from 0 up (Infinity allowed), got ${describe(value)}`, argumentOf(what));
  }
  return value;
}

export function checkWhole(what: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ThrottleConfigError(`Expected ${what} to be a whole number from ${min} to ${max}, got ${describe(value)}`, argumentOf(what));
  }
  return value;
}

export function checkBoolean(what: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new ThrottleConfigError(`Expected ${what} to be true or false, got ${describe(value)}`, argumentOf(what));
  return value;
}

/** An optional function: `undefined`, or a function. */
export function checkFunction<F extends (...args: never[]) => unknown>(what: string, value: F | undefined): F | undefined {
  if (value !== undefined && typeof value !== 'function')
    throw new ThrottleConfigError(`Expected ${what} to be a function, got ${describe(value)}`, argumentOf(what));
  return value;
}

export function checkCount(what: string, value: unknown, min = 1): number {
  if (value === Infinity) return value;
  return checkWhole(what, value, min);
}

/**
 * Names users write for an option of the library, by what they mean: tried before spelling, so that
 * `maxWaitMs` is answered `maxDelayMs`, not `maxHoldMs` (the closer by spelling). Keys are
 * compared as {@link suggestName} compares names; a target the receiver does not take is skipped.
 */
export const OPTION_SYNONYMS: Readonly<Record<string, string>> = {
  maxWait: 'maxDelayMs',
  maxWaitMs: 'maxDelayMs',
  wait: 'maxDelayMs',
  waitMs: 'maxDelayMs',
  deadline: 'maxDelayMs',
  timeout: 'timeoutMs',
  limit: 'rules',
  limits: 'rules',
  rate: 'rules',
  rateLimit: 'rules',
  rule: 'rules',
  namespace: 'name',
  maxRetries: 'retries',
  retry: 'retries',
  attempts: 'retries',
  retryDelay: 'fallbackPauseMs',
  retryDelayMs: 'fallbackPauseMs',
  backoff: 'fallbackPauseMs',
  backoffMs: 'fallbackPauseMs',
  weight: 'cost',
};

/**
 * Refuses option names the receiver does not know (a typo such as `maxDelay` for `maxDelayMs` would
 * otherwise be ignored), naming the one meant: by {@link OPTION_SYNONYMS}, else the closest by spelling.
 */
export function checkKnown(what: string, options: object, known: readonly string[]): void {
  for (const name of Object.keys(options)) {
    if (known.includes(name)) continue;
    const hint = suggestName(name, known, OPTION_SYNONYMS);
    throw new ThrottleConfigError(
      `Unknown ${what} option '${name}'${hint === undefined ? '' : ` (did you mean '${hint}'?)`}; known: ${known.join(', ')}`,
      name,
    );
  }
}

/**
 * The known name meant by `name`, if any: the same name in another spelling (case, `-` and `_` set
 * aside: `--maxDelayMs` is `--max-delay-ms`), else the one `synonyms` gives it (by meaning), else the
 * closest by spelling ({@link closestName}).
 */
export function suggestName(name: string, known: readonly string[], synonyms: Readonly<Record<string, string>> = {}): string | undefined {
  const bare = plain(name);
  const same = known.find((candidate) => plain(candidate) === bare);
  if (same !== undefined) return same;
  for (const [synonym, meant] of Object.entries(synonyms)) {
    if (plain(synonym) === bare && known.includes(meant)) return meant;
  }
  return closestName(name, known);
}

/** A name without leading dashes, case, `-` and `_`. */
function plain(name: string): string {
  return name.replace(/^-+/, '').replace(/[-_]/g, '').toLowerCase();
}

/** The known name closest to `name`, when it is close enough to be the one meant. */
export function closestName(name: string, known: readonly string[]): string | undefined {
  let closest: string | undefined;
  let best = Infinity;
  for (const candidate of known) {
    const d = distance(name, candidate);
    // Close enough for its length, and closer than any before it.
    if (d <= Math.max(2, Math.floor(candidate.length / 2)) && d < best) {
      closest = candidate;
      best = d;
    }
  }
  return closest;
}

/** Edit distance between two short names (Levenshtein). */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, diagonal + (a[i - 1]!.toLowerCase() === b[j - 1]!.toLowerCase() ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length]!;
}
