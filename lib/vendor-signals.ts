/**
 * What a vendor says about its limits, read from a response: `Retry-After`, the IETF `RateLimit` and
 * `RateLimit-Policy` fields (draft structured-field forms), `RateLimit-Remaining`/`RateLimit-Reset`
 * of the earlier drafts, and the de-facto `X-RateLimit-Remaining`/`X-RateLimit-Reset`.
 *
 * Pure functions: no I/O, and no clock read unless `now` is left out (then `Date.now()`). A malformed
 * value is ignored — the function answers as if the header were absent and tells `report` why — and
 * never throws. The adapters (lib/adapters/) turn `report` into `debug` events. See docs/adapters.md.
 */

/** Response headers: a fetch `Headers`, an `AxiosHeaders`, or a plain object such as Node's `IncomingHttpHeaders`. */
export type HeaderSource = { get(name: string): unknown } | Readonly<Record<string, unknown>>;

/** Receives one message per malformed value that was ignored. */
export type ProblemReporter = (message: string) => void;

/** The verdict on one response (see `readVendorSignal`). */
export interface VendorSignal {
  /**
   * The vendor refused this very request (so it was not performed): a 429; a 403 or 503 that carries
   * `Retry-After` or reports a limit with nothing remaining; or a response the user's hook flagged.
   */
  readonly refused: boolean;
  /**
   * How long the vendor asks the key to wait, in ms from now; `undefined` when it does not say. Also
   * set on a response that was not refused when it reports a limit with nothing remaining (the call
   * went through, the next one would not).
   */
  readonly pauseMs: number | undefined;
}

export interface VendorResponseInfo {
  /** HTTP status code. */
  readonly status: number;
  readonly headers: HeaderSource;
  /** The user's `isThrottled(response)` hook said the vendor refused the call (a 200 with an error body). */
  readonly flagged?: boolean;
  /** The local clock (ms since the epoch), used when the response has no valid `Date` header. @default Date.now() */
  readonly now?: number;
  readonly report?: ProblemReporter;
}

/** Statuses that are a refusal when they come with `Retry-After` or an exhausted limit (GitHub answers 403). */
const REFUSAL_WITH_SIGNAL = new Set([403, 503]);

/**
 * Decides whether a response says the vendor's limit was hit, and for how long the key should pause:
 * - `refused` (retry the request): status 429; 403 or 503 with a valid `Retry-After` or a limit with
 *   nothing remaining; or `flagged`;
 * - `pauseMs`, for a refused response: `Retry-After` (or `Retry-After-Ms`, the longer of the two),
 *   else the reset of the limits that are used up
 *   (`parseRateLimitHeaders`), else `undefined`; for any other response: the reset of the limits that
 *   are used up, if any (`Retry-After` is read only on refusals).
 *
 * Absolute times (an HTTP-date `Retry-After`, an epoch `X-RateLimit-Reset`) are measured against the
 * response's `Date` header — the vendor's clock — when it is valid, else against `now`.
 */
export function readVendorSignal(info: VendorResponseInfo): VendorSignal {
  const { status, headers, flagged = false, report } = info;
  const local = info.now ?? Date.now();
  const dateText = headerValue(headers, 'date');
  const vendorDate = dateText === undefined ? undefined : parseHttpDate(dateText, local);
  if (dateText !== undefined && vendorDate === undefined) report?.(`ignored malformed Date header ${quote(dateText)}; using the local clock`);
  const now = vendorDate ?? local;

  const limits = summarizeLimits(headers, now, report);
  let retryAfter: number | undefined;
  if (status === 429 || flagged || REFUSAL_WITH_SIGNAL.has(status)) {
    const text = headerValue(headers, 'retry-after');
    retryAfter = text === undefined ? undefined : parseRetryAfter(text, now);
    if (text !== undefined && retryAfter === undefined) report?.(`ignored malformed Retry-After header ${quote(text)}`);
    // `Retry-After-Ms` (Azure and others): the same wait in ms. With both, the longer is obeyed:
    // delay-seconds are often the ms rounded up, and a send before either has passed may be refused.
    const ms = nonNegative(headerValue(headers, 'retry-after-ms'), 'Retry-After-Ms', report);
    if (ms !== undefined) retryAfter = Math.max(retryAfter ?? 0, Math.ceil(ms));
  }
  const refused = status === 429 || flagged || (REFUSAL_WITH_SIGNAL.has(status) && (retryAfter !== undefined || limits.exhausted));
  const pauseMs = refused ? (retryAfter ?? limits.exhaustedResetMs ?? limits.unknownResetMs) : limits.exhaustedResetMs;
  return { refused, pauseMs };
}

/**
 * `Retry-After` (RFC 9110 §10.2.3) as ms from `now`: delay-seconds (`120`; decimals such as `1.5`
 * are accepted too) or an HTTP-date (`Wed, 21 Oct 2015 07:28:00 GMT`, also the obsolete RFC 850 and
 * asctime forms), a date in the past giving 0. `now` is the clock the date is compared with — pass
 * the response's `Date` when there is one. `undefined` for anything else.
 */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  const seconds = parseSeconds(text);
  if (seconds !== undefined) return seconds;
  const date = parseHttpDate(text, now);
  return date === undefined ? undefined : Math.max(0, Math.ceil(date - now));
}

/** Values from here on are Unix times in seconds: as a delay, 10⁹ s would be 31.7 years. */
const EPOCH_SECONDS_FROM = 1e9;
/** Values from here on are Unix times in ms: as seconds, 10¹² would be the year 33658. */
const EPOCH_MS_FROM = 1e12;

/**
 * An `X-RateLimit-Reset` (or `RateLimit-Reset`) value as ms from `now`. Vendors disagree on what it
 * holds, so the size of the number decides:
 * - below 10⁹: seconds from now (`30`, `1.5`) — no vendor resets 31.7 years ahead;
 * - from 10⁹ to 10¹²: a Unix time in seconds (`1735689600`, GitHub's form; decimals allowed);
 * - from 10¹²: a Unix time in ms.
 * A reset in the past gives 0. `now` is the clock Unix times are compared with — pass the response's
 * `Date` when there is one. `undefined` for anything that is not a non-negative number.
 */
export function parseRateLimitReset(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  if (!DECIMAL.test(text)) return undefined;
  const number = Number(text);
  if (!Number.isFinite(number)) return undefined;
  if (number >= EPOCH_MS_FROM) return Math.max(0, Math.ceil(number - now));
  if (number >= EPOCH_SECONDS_FROM) return Math.max(0, Math.ceil(number * 1_000 - now));
  return Math.ceil(number * 1_000);
}

export interface RateLimitHeaderOptions {
  /**
   * The vendor refused the request: when no limit reports `remaining` 0, fall back to the longest
   * reset of the limits that do not say what remains.
   */
  readonly refused?: boolean;
  readonly report?: ProblemReporter;
}

/**
 * How long to pause, in ms from `now`, according to the rate-limit headers; `undefined` when they
 * report no limit as used up (or give no reset for it). Read, in this order, and combined:
 * - IETF `RateLimit`, as a draft-7 dictionary (`limit=10, remaining=0, reset=30`) or as the later
 *   list of policies (`"default";r=0;t=30, "daily";r=90;t=3600`); `reset`/`t` are seconds from now;
 *   a used-up policy without `t` waits its window from `RateLimit-Policy` (`"default";q=10;w=60`,
 *   or the draft form `10;w=60`);
 * - `RateLimit-Remaining` with `RateLimit-Reset` (drafts 0–6);
 * - `X-RateLimit-Remaining` with `X-RateLimit-Reset` (see `parseRateLimitReset` for the forms).
 * The answer is the longest reset among limits with `remaining` 0 (several limits may be used up at
 * once, and every one must reset before the next call goes through).
 */
export function parseRateLimitHeaders(headers: HeaderSource, now: number = Date.now(), options: RateLimitHeaderOptions = {}): number | undefined {
  const limits = summarizeLimits(headers, now, options.report);
  return limits.exhaustedResetMs ?? (options.refused ? limits.unknownResetMs : undefined);
}

/** One limit a response reports. */
interface ReportedLimit {
  readonly name: string | undefined;
  readonly remaining: number | undefined;
  readonly resetMs: number | undefined;
}

interface LimitSummary {
  /** Some limit reports nothing remaining. */
  readonly exhausted: boolean;
  /** Longest reset among the used-up limits. */
  readonly exhaustedResetMs: number | undefined;
  /** Longest reset among limits that do not say what remains. */
  readonly unknownResetMs: number | undefined;
}

function summarizeLimits(headers: HeaderSource, now: number, report: ProblemReporter | undefined): LimitSummary {
  const windows = parsePolicies(headerValue(headers, 'ratelimit-policy'), report);
  const limits = [
    ...parseIetfRateLimit(headerValue(headers, 'ratelimit'), report),
    ...pairedLimit(headers, 'RateLimit', now, report),
    ...pairedLimit(headers, 'X-RateLimit', now, report),
  ];
  let exhausted = false;
  let exhaustedResetMs: number | undefined;
  let unknownResetMs: number | undefined;
  for (const limit of limits) {
    if (limit.remaining === undefined) {
      if (limit.resetMs !== undefined) unknownResetMs = Math.max(unknownResetMs ?? 0, limit.resetMs);
    } else if (limit.remaining <= 0) {
      exhausted = true;
      const resetMs = limit.resetMs ?? policyWindow(windows, limit.name);
      if (resetMs !== undefined) exhaustedResetMs = Math.max(exhaustedResetMs ?? 0, resetMs);
    }
  }
  return { exhausted, exhaustedResetMs, unknownResetMs };
}

/** The window of the named policy, else of the only policy, else the longest; ms. */
function policyWindow(windows: ReadonlyMap<string, number>, name: string | undefined): number | undefined {
  if (name !== undefined && windows.has(name)) return windows.get(name);
  if (windows.size === 0) return undefined;
  return Math.max(...windows.values());
}

/** `RateLimit`: a draft-7 dictionary (`limit=10, remaining=0, reset=30`) or a list of policies (`"default";r=0;t=30`). */
function parseIetfRateLimit(text: string | undefined, report: ProblemReporter | undefined): ReportedLimit[] {
  if (text === undefined) return [];
  const dictionary = new Map<string, string>();
  const limits: ReportedLimit[] = [];
  for (const member of splitOutsideQuotes(text, ',')) {
    const [head = '', ...rest] = splitOutsideQuotes(member, ';');
    const entry = /^([a-z*][a-z0-9_.*-]*)=(.*)$/i.exec(head);
    if (entry && !head.startsWith('"')) {
      dictionary.set(entry[1]!.toLowerCase(), entry[2]!);
      continue;
    }
    const name = parseBareItem(head);
    const params = parseParams(rest);
    if (name === undefined || (!params.has('r') && !params.has('t'))) {
      report?.(`ignored malformed RateLimit member ${quote(member)}`);
      continue;
    }
    const remaining = nonNegative(params.get('r'), 'RateLimit r', report);
    const reset = nonNegative(params.get('t'), 'RateLimit t', report);
    limits.push({ name, remaining, resetMs: reset === undefined ? undefined : Math.ceil(reset * 1_000) });
  }
  if (dictionary.size > 0) {
    if (!dictionary.has('remaining') && !dictionary.has('reset')) {
      report?.(`ignored malformed RateLimit header ${quote(text)}: no remaining or reset`);
    } else {
      const remaining = nonNegative(dictionary.get('remaining'), 'RateLimit remaining', report);
      const reset = nonNegative(dictionary.get('reset'), 'RateLimit reset', report);
      limits.push({ name: undefined, remaining, resetMs: reset === undefined ? undefined : Math.ceil(reset * 1_000) });
    }
  }
  return limits;
}

/** `RateLimit-Policy`: policy name (or the drafts' quota number) → window in ms, from the `w` parameter. */
function parsePolicies(text: string | undefined, report: ProblemReporter | undefined): Map<string, number> {
  const windows = new Map<string, number>();
  if (text === undefined) return windows;
  for (const member of splitOutsideQuotes(text, ',')) {
    const [head = '', ...rest] = splitOutsideQuotes(member, ';');
    const name = parseBareItem(head);
    const window = nonNegative(parseParams(rest).get('w'), 'RateLimit-Policy w', report);
    if (name === undefined) report?.(`ignored malformed RateLimit-Policy member ${quote(member)}`);
    else if (window !== undefined) windows.set(name, Math.ceil(window * 1_000));
  }
  return windows;
}

/** `<prefix>-Remaining` with `<prefix>-Reset`; a repeated header (`0, 5`) counts its lowest remaining and latest reset. */
function pairedLimit(headers: HeaderSource, prefix: string, now: number, report: ProblemReporter | undefined): ReportedLimit[] {
  const remainingText = headerValue(headers, `${prefix}-Remaining`);
  const resetText = headerValue(headers, `${prefix}-Reset`);
  if (remainingText === undefined && resetText === undefined) return [];
  let remaining: number | undefined;
  for (const part of remainingText?.split(',') ?? []) {
    const value = nonNegative(part, `${prefix}-Remaining`, report);
    if (value !== undefined) remaining = Math.min(remaining ?? Infinity, value);
  }
  let resetMs: number | undefined;
  for (const part of resetText?.split(',') ?? []) {
    const value = parseRateLimitReset(part, now);
    if (value === undefined) report?.(`ignored malformed ${prefix}-Reset value ${quote(part.trim())}`);
    else resetMs = Math.max(resetMs ?? 0, value);
  }
  return [{ name: undefined, remaining, resetMs }];
}

const DECIMAL = /^\d+(?:\.\d+)?$/;

/** A non-negative decimal number, or `undefined` (reported when the text is there but is not one). */
function nonNegative(text: string | undefined, what: string, report: ProblemReporter | undefined): number | undefined {
  if (text === undefined) return undefined;
  const trimmed = text.trim();
  const value = DECIMAL.test(trimmed) ? Number(trimmed) : NaN;
  if (Number.isFinite(value)) return value;
  report?.(`ignored malformed ${what} value ${quote(trimmed)}`);
  return undefined;
}

/** Delay-seconds: a non-negative decimal number of seconds, as whole ms (rounded up). */
function parseSeconds(text: string): number | undefined {
  if (!DECIMAL.test(text)) return undefined;
  const value = Math.ceil(Number(text) * 1_000);
  return Number.isFinite(value) ? value : undefined;
}

/** Structured-field parameters (`;r=0;t=30`): lower-case key → raw value (`?1` for a bare key). */
function parseParams(parts: readonly string[]): Map<string, string> {
  const params = new Map<string, string>();
  for (const part of parts) {
    const [key = '', ...value] = part.split('=');
    params.set(key.trim().toLowerCase(), value.length === 0 ? '?1' : value.join('=').trim());
  }
  return params;
}

/** A structured-field bare item used as a name: a quoted string, a token or a number. */
function parseBareItem(text: string): string | undefined {
  const trimmed = text.trim();
  const quoted = /^"((?:[^"\\]|\\.)*)"$/.exec(trimmed);
  if (quoted) return quoted[1]!.replace(/\\(.)/g, '$1');
  if (/^[a-z*][\w:/!#$%&'*+\-.^`|~]*$/i.test(trimmed) || /^-?\d+(?:\.\d+)?$/.test(trimmed)) return trimmed;
  return undefined;
}

/** Splits on `separator` outside double-quoted strings; drops empty parts. */
function splitOutsideQuotes(text: string, separator: string): string[] {
  const parts: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const char = text[i]!;
    if (quoted && char === '\\' && i + 1 < text.length) {
      current += char + text[++i]!;
      continue;
    }
    if (char === '"') quoted = !quoted;
    if (char === separator && !quoted) {
      parts.push(current.trim());
      current = '';
    } else {
      current += char;
    }
  }
  parts.push(current.trim());
  return parts.filter((part) => part.length > 0);
}

const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
const DAY = '(?:mon|tue|wed|thu|fri|sat|sun)';
const TIME = '(?<hour>\\d{2}):(?<minute>\\d{2}):(?<second>\\d{2})';
const HTTP_DATES = [
  // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
  new RegExp(`^${DAY}, (?<day>\\d{1,2}) (?<month>[a-z]{3}) (?<year>\\d{4}) ${TIME} gmt$`, 'i'),
  // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
  new RegExp(`^(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday), (?<day>\\d{1,2})-(?<month>[a-z]{3})-(?<year>\\d{2}) ${TIME} gmt$`, 'i'),
  // asctime: Sun Nov  6 08:49:37 1994
  new RegExp(`^${DAY} (?<month>[a-z]{3}) (?<day>\\d{1,2}) ${TIME} (?<year>\\d{4})$`, 'i'),
];

/**
 * An HTTP-date (RFC 9110 §5.6.7) as ms since the epoch: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`),
 * or the obsolete RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`)
 * forms, always UTC. A two-digit year more than 50 years after `now` is taken from the previous
 * century. `undefined` for anything else, including impossible dates (`31 Feb`).
 */
export function parseHttpDate(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (typeof value !== 'string') return undefined;
  const text = value.trim().replace(/\s+/g, ' ');
  let parts: Record<string, string> | undefined;
  for (const format of HTTP_DATES) {
    parts = format.exec(text)?.groups;
    if (parts) break;
  }
  if (!parts) return undefined;
  const month = MONTHS.indexOf(parts.month!.toLowerCase());
  const [day, hour, minute, second] = [parts.day, parts.hour, parts.minute, parts.second].map(Number) as [number, number, number, number];
  let year = Number(parts.year);
  if (parts.year!.length === 2) {
    year += 2000;
    if (year > new Date(now).getUTCFullYear() + 50) year -= 100;
  }
  if (month < 0 || day < 1 || hour > 23 || minute > 59 || second > 60) return undefined;
  const time = Date.UTC(year, month, day, hour, minute, Math.min(second, 59));
  return new Date(time).getUTCDate() === day ? time : undefined;
}

/** A header's value as text, looked up case-insensitively; repeated values joined with `, `. */
export function headerValue(headers: HeaderSource, name: string): string | undefined {
  if (headers === null || typeof headers !== 'object') return undefined;
  let value: unknown;
  if (typeof (headers as { get?: unknown }).get === 'function') {
    value = (headers as { get(name: string): unknown }).get(name);
  } else {
    const lower = name.toLowerCase();
    const record = headers as Readonly<Record<string, unknown>>;
    value = record[lower] ?? record[Object.keys(record).find((key) => key.toLowerCase() === lower) ?? lower];
  }
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return String(value);
  if (Array.isArray(value)) return value.map(String).join(', ');
  return undefined;
}

function quote(text: string): string {
  return JSON.stringify(text.length > 100 ? `${text.slice(0, 97)}...` : text);
}

/** A rule a vendor publishes in `RateLimit-Policy`: `quota` requests per `windowMs`. */
export interface PublishedPolicy {
  readonly name: string;
  readonly quota: number;
  readonly windowMs: number;
}

/** What a response says of the vendor's limits themselves (see `readPublishedLimits`). */
export interface PublishedLimits {
  /** `RateLimit-Policy`'s policies of requests with a quota and a window. */
  readonly policies: readonly PublishedPolicy[];
  /** `X-RateLimit-Limit` (or `RateLimit-Limit`): a limit with no window; the lowest when repeated. A value written `100;w=60` is a policy. */
  readonly limit: number | undefined;
  /**
   * What the vendor says remains, and when it resets (ms from now): `RateLimit` (`"burst";r=50;t=30`:
   * of the policy of that name, whose window is `windowMs`; the dictionary form names none), and
   * `X-RateLimit-Remaining`/`-Reset` (no window). Only those that say both.
   */
  readonly remaining: ReadonlyArray<{ readonly windowMs: number | undefined; readonly remaining: number; readonly resetMs: number }>;
}

/** The largest quota or limit taken from a vendor: above it a value is absurd, and ignored. */
export const MAX_PUBLISHED_LIMIT = 1_000_000_000;

/**
 * Reads the limits a vendor publishes: `RateLimit-Policy` (`"burst";q=100;w=60`: 100 requests per
 * 60 s) and `X-RateLimit-Limit`. A policy of another unit than requests (`qu`), or without `q` or
 * `w`, or with a value of 0 or an absurd one, is left out and `report`ed; `pk` (the vendor's name
 * for the partition the response counted in) is not needed: the caller names the key.
 */
export function readPublishedLimits(headers: HeaderSource, report?: ProblemReporter, now: number = Date.now()): PublishedLimits {
  const policies: PublishedPolicy[] = [];
  const windows = new Map<string, number>();
  const text = headerValue(headers, 'ratelimit-policy');
  for (const member of text === undefined ? [] : splitOutsideQuotes(text, ',')) {
    const [head = '', ...rest] = splitOutsideQuotes(member, ';');
    const name = parseBareItem(head);
    const params = parseParams(rest);
    const unit = params.get('qu');
    const quota = nonNegative(params.get('q'), 'RateLimit-Policy q', report);
    const window = nonNegative(params.get('w'), 'RateLimit-Policy w', report);
    const why =
      name === undefined
        ? 'malformed'
        : unit !== undefined && parseBareItem(unit) !== 'requests'
          ? `counted in ${unit}, not requests`
          : quota === undefined || window === undefined
            ? 'without both q and w'
            : quota < 1 || !Number.isInteger(quota)
              ? 'q is not a whole number from 1 up'
              : quota > MAX_PUBLISHED_LIMIT
                ? `q above ${MAX_PUBLISHED_LIMIT}`
                : window * 1_000 < 1 || window * 1_000 > 366 * 86_400_000
                  ? 'w is not between 1 ms and 366 days'
                  : undefined;
    if (why !== undefined) report?.(`ignored RateLimit-Policy member ${quote(member.trim())}: ${why}`);
    else policies.push({ name: name!, quota: quota!, windowMs: Math.ceil(window! * 1_000) });
    if (name !== undefined && window !== undefined) windows.set(name, Math.ceil(window * 1_000));
  }
  let limit: number | undefined;
  for (const prefix of ['X-RateLimit', 'RateLimit']) {
    const limitText = headerValue(headers, `${prefix}-Limit`);
    if (limitText === undefined) continue;
    for (const part of limitText.split(',')) {
      // `100;w=60` (a draft's form): a quota with its window, as a policy's.
      const [head = '', ...rest] = part.split(';');
      const value = nonNegative(head, `${prefix}-Limit`, report);
      if (value === undefined) continue;
      const window = rest.length === 0 ? undefined : nonNegative(parseParams(rest).get('w'), `${prefix}-Limit w`, report);
      if (value < 1 || !Number.isInteger(value) || value > MAX_PUBLISHED_LIMIT) {
        report?.(`ignored ${prefix}-Limit value ${quote(part.trim())}: not a whole number from 1 to ${MAX_PUBLISHED_LIMIT}`);
      } else if (window !== undefined && (window * 1_000 < 1 || window * 1_000 > 366 * 86_400_000)) {
        report?.(`ignored ${prefix}-Limit value ${quote(part.trim())}: w is not between 1 ms and 366 days`);
      } else if (window !== undefined) {
        policies.push({ name: `${prefix}-Limit`, quota: value, windowMs: Math.ceil(window * 1_000) });
      } else {
        limit = Math.min(limit ?? Infinity, value);
      }
    }
    break;
  }
  // Malformed values here are said by readVendorSignal, which reads the same headers.
  const remaining = [
    ...parseIetfRateLimit(headerValue(headers, 'ratelimit'), undefined).map((reported) => ({
      ...reported,
      windowMs: reported.name === undefined ? undefined : windows.get(reported.name),
    })),
    ...pairedLimit(headers, 'RateLimit', now, undefined).map((reported) => ({ ...reported, windowMs: undefined })),
    ...pairedLimit(headers, 'X-RateLimit', now, undefined).map((reported) => ({ ...reported, windowMs: undefined })),
  ].flatMap(({ windowMs, remaining: left, resetMs }) => (left === undefined || resetMs === undefined ? [] : [{ windowMs, remaining: left, resetMs }]));
  return { policies, limit, remaining };
}
