import { formatRule, parseRules, RedisStore, Throttle, type Rule } from '../index.js';
import { encodeKey, keyNames } from '../keys.js';
import { DEFAULT_MAX_HOLD_MS } from '../options.js';
import { withRemaining } from '../store.js';
import { ruleSource, type InspectOptions } from './args.js';
import { EXIT, type ExitCode } from './errors.js';
import { formatSeconds } from './progress.js';
import { closeRedis, connectRedis, type RedisClient } from './redis.js';
import type { RuleString } from '../rules.js';
import type { LearnedLimit } from '../learning.js';

/** What `inspect` reports for one key. Usage per rule and the next free slot need `--rule`. */
export interface KeyReport {
  /** The user key, decoded; for an id longer than 200 characters, only its stored digest (`h:…`). */
  readonly key: string;
  /** False when the key is stored as a digest and cannot be shown. */
  readonly decoded: boolean;
  readonly rules?: ReadonlyArray<{
    readonly rule: string;
    readonly limit: number;
    readonly windowMs: number;
    readonly used: number;
    readonly remaining: number;
    readonly resetInMs: number;
  }>;
  /** Calls booked to start later, apart from `used` (with `--rule`). */
  readonly bookedAhead?: number;
  readonly nextFreeInMs?: number;
  /** False when Redis holds nothing for the key (a new key, idle past its windows, or another --name or --prefix). */
  readonly stored: boolean;
  readonly pausedForMs: number;
  /** Limits the key learned from its vendor, in force (with `--rule`). */
  readonly learned?: readonly LearnedLimit[];
  /** Slots in the key's log: calls within the history kept (the longest window), booked ones included. */
  readonly logged: number;
  /** Calls booked in any process whose completion is not recorded yet: waiting for their slot or in flight. */
  readonly unfinished: number;
}

/** SCAN batch size (a hint to Redis) and key reports read at once. */
const SCAN_COUNT = 1_000;
const PARALLEL = 64;

/**
 * `vendor-throttle inspect`: one key's usage (through `throttle.inspect(key)`), or the `top`
 * busiest keys of the namespace, found with SCAN on every master (never KEYS) and ranked by
 * current usage: the fullest rule first, with `--rule`, else the slots logged.
 */
export async function inspect(options: InspectOptions): Promise<ExitCode> {
  // Per key: its own rules (KEY=RULE), else those given for every key.
  const source = options.rules.length > 0 ? ruleSource(options.rules) : undefined;
  const rulesOf = (key: string): Rule[] | undefined => {
    const given = source === undefined ? [] : typeof source === 'function' ? source(key) : source;
    // A key with no rules given (only KEY=RULE for others): what the log holds, as without --rule.
    return given.length === 0 ? undefined : parseRules(given as RuleString[]);
  };
  const client = await connectRedis(options.redis, options.cluster);
  try {
    const store = new RedisStore(client, { prefix: options.prefix, hashTag: options.hashTag });
    if (options.key !== undefined) {
      let report: KeyReport;
      const rules = rulesOf(options.key);
      if (rules === undefined) report = await rawReport(client, options, encodeKey(options.key), options.key);
      else {
        const throttle = new Throttle({ name: options.name, rules, store });
        try {
          const usage = await throttle.inspect(options.key);
          const counts = await countsOf(client, options, encodeKey(options.key));
          const { rules: used, bookedAhead, nextFreeInMs, pausedForMs, stored, learned } = usage;
          report = {
            key: usage.key,
            decoded: true,
            rules: used.map((rule) => ({ rule: formatRule(rule), ...rule })),
            bookedAhead,
            nextFreeInMs,
            pausedForMs,
            stored,
            learned,
            ...counts,
          };
        } finally {
          await throttle.close();
        }
      }
      process.stdout.write(options.json ? `${JSON.stringify(report, null, 2)}\n` : describeKey(report, options));
      return EXIT.ok;
    }

    const encoded = await scanKeys(client, options);
    const reports: KeyReport[] = [];
    for (let i = 0; i < encoded.length; i += PARALLEL) {
      reports.push(...(await Promise.all(encoded.slice(i, i + PARALLEL).map((key) => keyReport(client, store, options, key, rulesOf(decodeKey(key).key))))));
    }
    reports.sort((a, b) => load(b) - load(a) || b.logged - a.logged || a.key.localeCompare(b.key));
    const top = reports.slice(0, options.top);
    const namespace = `${options.prefix}:${options.name}`;
    if (options.json) process.stdout.write(`${JSON.stringify({ namespace, found: reports.length, keys: top }, null, 2)}\n`);
    else
      process.stdout.write(
        describeBusiest(
          top,
          reports.length,
          namespace,
          source === undefined ? undefined : typeof source === 'function' ? 'per key' : parseRules(source as RuleString[]),
        ),
      );
    return EXIT.ok;
  } finally {
    await closeRedis(client);
  }
}

/** The encoded keys of the namespace that have a log, from SCAN on each master. */
async function scanKeys(client: RedisClient, options: InspectOptions): Promise<string[]> {
  const base = options.hashTag === 'key' ? `${options.prefix}:${options.name}:{` : `${options.prefix}:${options.name}:{${options.name}}:`;
  const suffix = options.hashTag === 'key' ? '}:log' : ':log';
  // Names and prefixes hold no glob characters (checkNamespace), and encoded keys no braces.
  const match = `${base}*${suffix}`;
  const nodes = 'nodes' in client && typeof client.nodes === 'function' && client.isCluster ? client.nodes('master') : [client];
  const found = new Set<string>();
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', match, 'COUNT', SCAN_COUNT);
      cursor = next;
      for (const key of keys) if (key.startsWith(base) && key.endsWith(suffix)) found.add(key.slice(base.length, -suffix.length));
    } while (cursor !== '0');
  }
  return [...found];
}

async function keyReport(
  client: RedisClient,
  store: RedisStore,
  options: InspectOptions,
  encoded: string,
  rules: readonly Rule[] | undefined,
): Promise<KeyReport> {
  const { key, decoded } = decodeKey(encoded);
  if (rules === undefined) return rawReport(client, options, encoded, key, decoded);
  // The throttle's default maxHoldMs: a slot released later than that from now was booked ahead.
  const [usage, counts] = await Promise.all([store.inspect(options.name, encoded, rules, DEFAULT_MAX_HOLD_MS), countsOf(client, options, encoded)]);
  return {
    key,
    decoded,
    // The key's own rules, each at its limit in force (a learned limit of another window is not a column).
    rules: withRemaining(usage)
      .slice(0, rules.length)
      .map((rule) => ({ rule: formatRule(rule), ...rule })),
    bookedAhead: usage.bookedAhead ?? 0,
    nextFreeInMs: usage.nextFreeInMs,
    pausedForMs: usage.pausedForMs,
    stored: usage.stored ?? true,
    learned: usage.learned ?? [],
    ...counts,
  };
}

async function countsOf(client: RedisClient, options: InspectOptions, encoded: string): Promise<{ logged: number; unfinished: number }> {
  const names = keyNames(options.prefix, options.name, encoded, options.hashTag);
  // A release later than now is a call in flight or booked ahead (lua/includes/log.lua).
  const time = await client.time();
  const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
  const [logged, unfinished] = await Promise.all([client.zcard(names.log), client.zcount(names.log, `(${now}`, '+inf')]);
  return { logged, unfinished };
}

/** Without rules: what the log holds, and the pause, read with plain commands on the Redis clock. */
async function rawReport(client: RedisClient, options: InspectOptions, encoded: string, key: string, decoded = true): Promise<KeyReport> {
  const names = keyNames(options.prefix, options.name, encoded, options.hashTag);
  const [counts, pause, time, stored] = await Promise.all([
    countsOf(client, options, encoded),
    client.hget(names.meta, 'pause'),
    client.time(),
    client.exists(names.log, names.meta),
  ]);
  const now = Number(time[0]) * 1000 + Number(time[1]) / 1000;
  return { key, decoded, pausedForMs: Math.max(0, Math.ceil(Number(pause ?? 0) - now)), stored: stored > 0, ...counts };
}

/** Reverses `encodeKey`: percent-encoding, `u:` + UTF-16 hex; `h:` digests cannot be reversed. */
export function decodeKey(encoded: string): { key: string; decoded: boolean } {
  if (encoded.startsWith('h:')) return { key: encoded, decoded: false };
  if (encoded.startsWith('u:')) {
    const hex = encoded.slice(2);
    let key = '';
    for (let i = 0; i + 4 <= hex.length; i += 4) key += String.fromCharCode(Number.parseInt(hex.slice(i, i + 4), 16));
    return { key, decoded: true };
  }
  try {
    return { key: decodeURIComponent(encoded), decoded: true };
  } catch {
    return { key: encoded, decoded: false };
  }
}

/** Fullest rule (used / limit), else slots logged: what ranks the busiest keys. */
function load(report: KeyReport): number {
  if (report.rules === undefined) return 0;
  return Math.max(0, ...report.rules.map((rule) => rule.used / rule.limit));
}

function describeKey(report: KeyReport, options: InspectOptions): string {
  const lines = [`key ${JSON.stringify(report.key)} of ${options.prefix}:${options.name}`];
  if (!report.stored) {
    lines.push(`  nothing stored for this key: a new key, one idle past its windows, or another --name or --prefix`);
  }
  if (report.rules !== undefined) {
    const rows = report.rules.map((rule) => [
      rule.rule,
      `${rule.used}/${rule.limit}`,
      String(rule.remaining),
      rule.used === 0 ? '-' : duration(rule.resetInMs),
    ]);
    lines.push(...table(['rule', 'used', 'remaining', 'oldest stops counting in'], rows).map((line) => `  ${line}`));
    lines.push(`  booked to start later (all processes): ${report.bookedAhead ?? 0}`);
    lines.push(`  next free slot: ${report.nextFreeInMs === 0 ? 'now' : `in ${duration(report.nextFreeInMs!)}`}`);
  } else {
    lines.push(`  slots logged: ${report.logged} (pass --rule to see usage per rule and the next free slot)`);
  }
  lines.push(`  paused: ${report.pausedForMs === 0 ? 'no' : `for ${duration(report.pausedForMs)}`}`);
  for (const { limit, windowMs, source, lapsesInMs } of report.learned ?? []) {
    const from = source === 'policy' ? 'RateLimit-Policy' : 'X-RateLimit-Limit';
    lines.push(`  learned from the vendor: ${formatRule({ limit, windowMs })} (${from}), lapses in ${duration(lapsesInMs)} unless said again`);
  }
  lines.push(`  booked, not completed (all processes): ${report.unfinished}`);
  return `${lines.join('\n')}\n`;
}

/** `rules`: the same for every key (a column each), `'per key'` (one column), or none given. */
function describeBusiest(top: readonly KeyReport[], found: number, namespace: string, rules: readonly Rule[] | 'per key' | undefined): string {
  if (found === 0) return `no keys with a log in ${namespace}: nothing used within its windows, or another --name or --prefix\n`;
  const header = [
    'key',
    ...(rules === 'per key' ? ['usage'] : (rules ?? []).map(formatRule)),
    ...(rules ? ['next free'] : ['logged']),
    'paused',
    'not completed',
  ];
  const rows = top.map((report) => [
    report.decoded ? report.key : `${report.key} (hashed id)`,
    ...(rules === 'per key'
      ? [(report.rules ?? []).map((rule) => `${rule.rule} ${rule.used}/${rule.limit}`).join(', ')]
      : (report.rules ?? []).map((rule) => `${rule.used}/${rule.limit}`)),
    ...(rules
      ? [report.nextFreeInMs === undefined ? '-' : report.nextFreeInMs === 0 ? 'now' : `in ${duration(report.nextFreeInMs)}`]
      : [String(report.logged)]),
    report.pausedForMs === 0 ? '-' : duration(report.pausedForMs),
    String(report.unfinished),
  ]);
  return `${top.length} busiest of ${found} key${found === 1 ? '' : 's'} in ${namespace} (SCAN)${rules ? '' : '; pass --rule to rank by usage per rule'}\n${table(header, rows).join('\n')}\n`;
}

function table(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string[] {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

function duration(ms: number): string {
  if (ms < 1_000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return formatSeconds(ms / 1000);
}
