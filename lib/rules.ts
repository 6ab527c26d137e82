import { ThrottleConfigError } from './errors.js';
export { formatRule } from './rule-label.js';

/**
 * At most `limit` calls may start in any interval of `windowMs` milliseconds; with `windowMs` 0 (a
 * rule written `'4 concurrent'` or `{ concurrent: 4 }`), at most `limit` calls may be in flight at
 * once, from their start until their completion.
 */
export interface Rule {
  readonly limit: number;
  /** The window in ms; 0 for a cap on calls in flight ({@link isConcurrent}). */
  readonly windowMs: number;
  /**
   * Set by the throttle for a long window with a large limit (see `ThrottleOptions.bucketAbove`):
   * completed calls older than the exact rules need are counted in buckets of this width (ms),
   * each as if it ended at its bucket's end. Absent or 0: every call is kept (exact).
   */
  readonly bucketMs?: number;
}

/**
 * A rule as users write it: `{ limit, windowMs }` or a string `N/unit`, where unit is one of
 * `ms`, `s`, `sec`, `second`, `m`, `min`, `minute`, `h`, `hr`, `hour`, `d`, `day`, optionally after an
 * amount: `30/90s`, `20/500ms`, `2/1.5h` (the window must come out as whole milliseconds); or a cap
 * on calls in flight across every process, `{ concurrent: N }` or the string `'N concurrent'`.
 */
export type RuleInput = Rule | { readonly concurrent: number } | RuleString;

/** The units of a rule string (case does not matter at run time). */
export type RuleUnit = 'ms' | 's' | 'sec' | 'second' | 'm' | 'min' | 'minute' | 'h' | 'hr' | 'hour' | 'd' | 'day';

/**
 * A rule string as TypeScript can check it: `'5/s'`, `'30/min'`, `'20/500ms'`, `'4 concurrent'`.
 * `'5/fortnight'` does not compile. Strings built at run time (a config file, a flag) can be passed
 * as `RuleString` after a cast: `parseRule()` validates every string at run time anyway.
 */
export type RuleString = `${number}/${RuleUnit}` | `${number}/${number}${RuleUnit}` | `${number} concurrent`;

const UNIT_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1_000,
  sec: 1_000,
  second: 1_000,
  m: 60_000,
  min: 60_000,
  minute: 60_000,
  h: 3_600_000,
  hr: 3_600_000,
  hour: 3_600_000,
  d: 86_400_000,
  day: 86_400_000,
};

const SHORTHAND = /^\s*(\d+)\s*\/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$/i;
const CONCURRENT = /^\s*(\d+)\s+concurrent\s*$/i;

/** Largest window accepted: 366 days. Longer windows are almost certainly a unit mistake. */
export const MAX_WINDOW_MS = 366 * 86_400_000;
/** Largest limit accepted per rule. */
export const MAX_LIMIT = 10_000_000;

/** Parses and validates one rule. Throws {@link ThrottleConfigError} saying what was expected. */
export function parseRule(input: RuleInput): Rule {
  if (typeof input === 'string') return parseShorthand(input);
  if (input === null || typeof input !== 'object') {
    throw new ThrottleConfigError(`Expected a rule like '30/min', { limit, windowMs } or { concurrent }, got ${describe(input)}`, 'rules');
  }
  if ('concurrent' in input) {
    const { concurrent } = input;
    if ('limit' in input || 'windowMs' in input) {
      throw new ThrottleConfigError(`Expected a rule to be { limit, windowMs } or { concurrent }, not both, got ${describe(input)}`, 'rules');
    }
    checkLimit(concurrent, input);
    return { limit: concurrent, windowMs: 0 };
  }
  const { limit, windowMs } = input;
  checkLimit(limit, input);
  checkWindow(windowMs, input);
  return { limit, windowMs };
}

/** Whether the rule caps calls in flight (`'4 concurrent'`) rather than calls per window. */
export function isConcurrent(rule: Rule): boolean {
  return rule.windowMs === 0;
}

/** Parses a non-empty list of rules; duplicates are kept (harmless), order is preserved. */
export function parseRules(input: readonly RuleInput[] | RuleInput): Rule[] {
  const list = Array.isArray(input) ? input : [input as RuleInput];
  if (list.length === 0) throw new ThrottleConfigError('Expected at least one rule, got an empty list', 'rules');
  return list.map(parseRule);
}

/** The longest window of a rule list: how long the history must be kept. */
export function longestWindow(rules: readonly Rule[]): number {
  return rules.reduce((max, rule) => Math.max(max, rule.windowMs), 0);
}

function parseShorthand(text: string): Rule {
  const concurrent = CONCURRENT.exec(text);
  if (concurrent) {
    const limit = Number(concurrent[1]);
    checkLimit(limit, text);
    return { limit, windowMs: 0 };
  }
  const match = SHORTHAND.exec(text);
  const unitMs = match ? UNIT_MS[match[3]!.toLowerCase()] : undefined;
  if (!match || unitMs === undefined) {
    throw new ThrottleConfigError(
      `Expected a rule like '30/min', '5/s', '10000/day', '30/90s' (units: ${Object.keys(UNIT_MS).join(', ')}) or '4 concurrent', got '${text}'`,
      'rules',
    );
  }
  const limit = Number(match[1]);
  const windowMs = (match[2] === undefined ? 1 : Number(match[2])) * unitMs;
  checkLimit(limit, text);
  checkWindow(windowMs, text);
  return { limit, windowMs };
}

function checkLimit(limit: unknown, input: unknown): asserts limit is number {
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw new ThrottleConfigError(`Expected rule limit to be a whole number from 1 to ${MAX_LIMIT}, got ${describe(limit)} in ${describe(input)}`, 'rules');
  }
}

function checkWindow(windowMs: unknown, input: unknown): asserts windowMs is number {
  if (typeof windowMs !== 'number' || !Number.isInteger(windowMs) || windowMs < 1 || windowMs > MAX_WINDOW_MS) {
    const hint = windowMs === 0 ? ' (a cap on calls in flight is written { concurrent: N })' : '';
    throw new ThrottleConfigError(
      `Expected rule windowMs to be a whole number of milliseconds from 1 to ${MAX_WINDOW_MS}, got ${describe(windowMs)} in ${describe(input)}${hint}`,
      'rules',
    );
  }
}

/** Renders any value for an error message without throwing. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return `'${value.length > 80 ? `${value.slice(0, 77)}...` : value}'`;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (value === null || value === undefined) return String(value);
  if (typeof value === 'function') return 'a function';
  try {
    const json = JSON.stringify(value);
    return json.length > 80 ? `${json.slice(0, 77)}...` : json;
  } catch {
    // Not a failure: a value JSON cannot render (a cycle, a BigInt inside) is named by its tag.
    return Object.prototype.toString.call(value);
  }
}
