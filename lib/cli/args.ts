import { parseArgs, type ParseArgsConfig } from 'node:util';
import { closestName } from '../validate.js';
import { checkNamespace, type HashTag } from '../keys.js';
import { parseRule } from '../rules.js';
import { CliError } from './errors.js';
import type { RuleString } from '../rules.js';

/** How a run builds its throttle; plain data, so that it can be sent to worker processes. */
export interface ThrottleConfig {
  /**
   * Rules as given, each checked: `30/min` (a rule of every key that has none of its own), or
   * `KEY=30/min` (a rule of the key KEY alone, such as an app-wide key given with a second `--key`).
   */
  readonly rules: readonly string[];
  readonly name: string;
  readonly prefix: string;
  /** Redis URL; none: an in-memory store per process. */
  readonly redis: string | undefined;
  /** Treat `redis` as a seed node of a Redis Cluster. */
  readonly cluster: boolean;
  /** The `RedisStore` `hashTag`: `'name'` puts every key of the throttle in one Cluster slot. */
  readonly hashTag: HashTag;
  readonly mode: 'wait' | 'delay' | 'queue';
}

/** How each request is sent; plain data, sent to worker processes. */
export interface SendSettings {
  /** Requests of one process under way at once (waiting for a slot, in flight or waiting to retry). */
  readonly concurrency: number;
  /** Sends after the first one, on a 429, a 5xx or a network error. */
  readonly retries: number;
  /** Wait before the first retry after a 5xx or a network error, doubled for each further one (at most 30 s). */
  readonly retryDelayMs: number;
  /** Limit per attempt, from sending the request to the end of its body. */
  readonly timeoutMs: number;
  /**
   * `--max-wait`: the longest an attempt may wait for its slot (the throttle's per-call
   * `maxDelayMs`); a request that cannot get one within it is not sent and is recorded as refused.
   * Undefined: no limit (so that it survives the JSON of the worker channel, where `Infinity` would not).
   */
  readonly maxWaitMs: number | undefined;
  /** Write the response body into the results. */
  readonly keepBody: boolean;
}

export interface RunOptions {
  /** The input file, or {@link STDIN} (`-`): standard input. */
  readonly file: string;
  readonly format: 'ndjson' | 'csv';
  /** `--key` templates: the first gives the request's key (none: its `key` field), the others more keys it counts in. */
  readonly keys: readonly string[];
  readonly baseUrl: string | undefined;
  /** Headers every request gets (a request's own headers win). */
  readonly headers: Readonly<Record<string, string>>;
  readonly throttle: ThrottleConfig;
  readonly send: SendSettings;
  readonly workers: number;
  /** Results file; none: standard output. */
  readonly out: string | undefined;
  readonly resume: boolean;
  readonly overwrite: boolean;
  readonly quiet: boolean;
}

export interface InspectOptions {
  /** The user key to inspect; none: the busiest keys of the namespace. */
  readonly key: string | undefined;
  readonly redis: string;
  readonly cluster: boolean;
  readonly hashTag: HashTag;
  readonly name: string;
  readonly prefix: string;
  readonly rules: readonly string[];
  readonly top: number;
  readonly json: boolean;
}

export const RUN_FLAGS = {
  rule: { type: 'string', short: 'r', multiple: true },
  key: { type: 'string', short: 'k', multiple: true },
  format: { type: 'string' },
  'base-url': { type: 'string' },
  header: { type: 'string', short: 'H', multiple: true },
  redis: { type: 'string' },
  cluster: { type: 'boolean' },
  'hash-tag': { type: 'string' },
  name: { type: 'string' },
  prefix: { type: 'string' },
  mode: { type: 'string' },
  workers: { type: 'string', short: 'w' },
  concurrency: { type: 'string', short: 'c' },
  retries: { type: 'string' },
  'retry-delay': { type: 'string' },
  timeout: { type: 'string' },
  'max-wait': { type: 'string' },
  out: { type: 'string', short: 'o' },
  resume: { type: 'boolean' },
  overwrite: { type: 'boolean' },
  'no-body': { type: 'boolean' },
  quiet: { type: 'boolean', short: 'q' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies ParseArgsConfig['options'];

export const INSPECT_FLAGS = {
  redis: { type: 'string' },
  cluster: { type: 'boolean' },
  'hash-tag': { type: 'string' },
  name: { type: 'string' },
  prefix: { type: 'string' },
  rule: { type: 'string', short: 'r', multiple: true },
  top: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies ParseArgsConfig['options'];

/** The input file name that means standard input. */
export const STDIN = '-';

/** `--help` asked for: the caller prints the command's help and exits 0. */
export const HELP = Symbol('help');

/** Parses and checks the flags of `vendor-throttle run`. Throws `CliError` (exit 2) saying which flag is wrong and why. */
export function parseRunArgs(args: readonly string[]): RunOptions | typeof HELP {
  const { values, positionals } = parse(args, RUN_FLAGS, 'run');
  if (values.help) return HELP;
  if (positionals.length !== 1) {
    throw new CliError(
      positionals.length === 0
        ? "run: missing the input file (NDJSON or CSV; '-' reads standard input)"
        : `run: expected one input file, got ${positionals.length}: ${positionals.join(' ')}`,
    );
  }
  const file = positionals[0]!;
  // Standard input has no name to tell the format by: NDJSON unless --format says otherwise.
  const format = values.format ?? (file !== STDIN && /\.csv$/i.test(file) ? 'csv' : 'ndjson');
  if (format !== 'ndjson' && format !== 'csv') throw new CliError(`--format: expected 'ndjson' or 'csv', got '${format}'`);
  // One waiting discipline; 'queue' and 'delay' name it as version 0.1 did.
  const mode = values.mode ?? 'wait';
  if (mode !== 'wait' && mode !== 'delay' && mode !== 'queue')
    throw new CliError(`--mode: expected 'wait' (the only waiting mode; 'queue' and 'delay' are read as it), got '${mode}'`);
  if (values.resume && values.overwrite) throw new CliError('--resume and --overwrite exclude each other');
  if ((values.resume || values.overwrite) && values.out === undefined) {
    throw new CliError(`--${values.resume ? 'resume' : 'overwrite'} needs --out <results file>`);
  }
  if (values.cluster && values.redis === undefined) throw new CliError('--cluster needs --redis <url of a cluster node>');
  const keys = values.key ?? [];
  if (keys.some((key) => key.trim() === '')) throw new CliError('--key: expected a template such as {user_id}, header:x-user, query:user or path:2');
  const tag = hashTag(values['hash-tag']);
  if (values['hash-tag'] !== undefined && values.redis === undefined)
    throw new CliError('--hash-tag needs --redis <url> (it names the layout of the keys in Redis)');
  if (keys.length > 1 && values.cluster && tag !== 'name') {
    throw new CliError(
      "--key given more than once on a Redis Cluster needs --hash-tag name (every key of the throttle in one slot; the services that share it must use RedisStore { hashTag: 'name' } too)",
    );
  }
  if (keys.length > 1 && values.redis === undefined && (values.workers ?? '1') !== '1') {
    throw new CliError(
      '--key given more than once with --workers: keys shared by requests of every worker (an app-wide key) need --redis to share their limits',
    );
  }
  return {
    file,
    format,
    keys,
    baseUrl: values['base-url'] === undefined ? undefined : httpUrl('--base-url', values['base-url']),
    headers: headerFlags(values.header ?? []),
    throttle: {
      rules: rules(values.rule, true),
      name: namespace('--name', values.name ?? 'default'),
      prefix: namespace('--prefix', values.prefix ?? 'vt'),
      redis: values.redis === undefined ? undefined : redisUrl(values.redis),
      cluster: values.cluster ?? false,
      hashTag: tag,
      mode,
    },
    send: {
      concurrency: whole('--concurrency', values.concurrency ?? '16', 1, 10_000),
      retries: whole('--retries', values.retries ?? '2', 0, 100),
      retryDelayMs: duration('--retry-delay', values['retry-delay'] ?? '1s'),
      timeoutMs: duration('--timeout', values.timeout ?? '30s', 1),
      maxWaitMs: values['max-wait'] === undefined ? undefined : duration('--max-wait', values['max-wait']),
      keepBody: !values['no-body'],
    },
    workers: whole('--workers', values.workers ?? '1', 1, 256),
    out: values.out,
    resume: values.resume ?? false,
    overwrite: values.overwrite ?? false,
    quiet: values.quiet ?? false,
  };
}

/** Parses and checks the flags of `vendor-throttle inspect`. */
export function parseInspectArgs(args: readonly string[]): InspectOptions | typeof HELP {
  const { values, positionals } = parse(args, INSPECT_FLAGS, 'inspect');
  if (values.help) return HELP;
  if (values.redis === undefined) throw new CliError('inspect: --redis <url> is required (inspect reads the shared log in Redis)');
  if (positionals.length > 1) throw new CliError(`inspect: expected at most one key, got ${positionals.length}: ${positionals.join(' ')}`);
  return {
    key: positionals[0],
    redis: redisUrl(values.redis),
    cluster: values.cluster ?? false,
    hashTag: hashTag(values['hash-tag']),
    name: namespace('--name', values.name ?? 'default'),
    prefix: namespace('--prefix', values.prefix ?? 'vt'),
    rules: rules(values.rule, false),
    top: whole('--top', values.top ?? '10', 1, 10_000),
    json: values.json ?? false,
  };
}

function parse<T extends NonNullable<ParseArgsConfig['options']>>(args: readonly string[], options: T, command: string) {
  try {
    return parseArgs({ args: [...args], options, allowPositionals: true, strict: true });
  } catch (error) {
    const message = error instanceof Error ? error.message.split('. To specify a positional')[0]! : String(error);
    // An unknown flag: name the closest known one (`--rules` for `--rule`).
    const unknown = /^Unknown option '(--?[^']+)'/.exec(message)?.[1];
    const hint =
      unknown === undefined
        ? undefined
        : closestName(
            unknown,
            Object.keys(options).map((name) => `--${name}`),
          );
    throw new CliError(`${command}: ${message}${hint === undefined ? '' : ` (did you mean '${hint}'?)`} (see vendor-throttle ${command} --help)`);
  }
}

function rules(values: readonly string[] | undefined, required: boolean): string[] {
  if (required && !(values ?? []).some((rule) => splitRule(rule).key === undefined)) {
    throw new CliError('run: at least one --rule is required, for every key, e.g. --rule 30/min (and --rule app=1000/min for a key of its own)');
  }
  return (values ?? []).map((given) => {
    const { key, rule } = splitRule(given);
    if (key === '') throw new CliError(`--rule '${given}': expected a key before '=', as in app=1000/min`);
    try {
      parseRule(rule as RuleString);
    } catch (error) {
      throw new CliError(`--rule '${given}': ${(error as Error).message}`);
    }
    return given;
  });
}

function namespace(flag: string, value: string): string {
  try {
    return checkNamespace(flag, value);
  } catch (error) {
    throw new CliError((error as Error).message);
  }
}

function whole(flag: string, text: string, min: number, max: number): number {
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || value < min || value > max) {
    throw new CliError(`${flag}: expected a whole number from ${min} to ${max}, got '${text}'`);
  }
  return value;
}

const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?$/;
const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, min: 60_000, h: 3_600_000 };

/** `500`, `500ms`, `30s`, `2m`, `1h` → ms (a bare number is ms). */
export function duration(flag: string, text: string, min = 0): number {
  const match = DURATION.exec(text.trim());
  const ms = match ? Math.round(Number(match[1]) * UNIT_MS[match[2] ?? 'ms']!) : NaN;
  if (!(ms >= min) || ms > 86_400_000) {
    throw new CliError(`${flag}: expected a duration such as 500ms, 30s or 2m (a bare number is ms), up to a day, got '${text}'`);
  }
  return ms;
}

function httpUrl(flag: string, text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new CliError(`${flag}: expected an absolute http(s) URL, got '${text}'`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new CliError(`${flag}: expected an http or https URL, got '${text}'`);
  return url.href;
}

function redisUrl(text: string): string {
  let url: URL | undefined;
  try {
    url = new URL(text);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'redis:' && url.protocol !== 'rediss:')) {
    throw new CliError(`--redis: expected a URL such as redis://127.0.0.1:6379 or rediss://user:password@host:6380/0, got '${text}'`);
  }
  return text;
}

function headerFlags(values: readonly string[]): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const value of values) {
    const colon = value.indexOf(':');
    const name = colon > 0 ? value.slice(0, colon).trim() : '';
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new CliError(`--header: expected 'Name: value', got '${value}'`);
    headers[name.toLowerCase()] = value.slice(colon + 1).trim();
  }
  return headers;
}

/** `KEY=RULE` (a rule of the key KEY alone) or `RULE` (of every key without rules of its own). */
export function splitRule(given: string): { readonly key: string | undefined; readonly rule: string } {
  const at = given.lastIndexOf('=');
  return at < 0 ? { key: undefined, rule: given } : { key: given.slice(0, at).trim(), rule: given.slice(at + 1) };
}

/** The rules of a run as the throttle takes them: the same for every key, or per key where `KEY=RULE` is given. */
export function ruleSource(given: readonly string[]): string[] | ((key: string) => string[]) {
  const shared: string[] = [];
  const own = new Map<string, string[]>();
  for (const text of given) {
    const { key, rule } = splitRule(text);
    if (key === undefined) shared.push(rule);
    else own.set(key, [...(own.get(key) ?? []), rule]);
  }
  if (own.size === 0) return shared;
  return (key) => own.get(key) ?? shared;
}

function hashTag(value: string | undefined): HashTag {
  if (value === undefined || value === 'key' || value === 'name') return value ?? 'key';
  throw new CliError(`--hash-tag: expected 'key' or 'name' (as the RedisStore option hashTag of the services sharing the limits), got '${value}'`);
}
