import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ThrottleConfigError } from '../errors.js';
import { checkNamespace, type HashTag } from '../keys.js';
import { parseRule } from '../rules.js';
import { suggestName } from '../validate.js';
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
  /** Sends after the first one, on a 429, a 5xx or a network error (the adapters' `retries`). */
  readonly retries: number;
  /**
   * The pause before a retry when the answer did not say how long (the adapters' `fallbackPauseMs`):
   * a key's pause after a 429 without `Retry-After`, and the wait before the first retry after a 5xx
   * or a network error, doubled for each further one (at most 30 s).
   */
  readonly fallbackPauseMs: number;
  /** Limit per attempt, from sending the request to the end of its body (the throttle's `timeoutMs`). */
  readonly timeoutMs: number;
  /**
   * `--max-delay-ms`: the longest an attempt may wait for its slot (the throttle's per-call
   * `maxDelayMs`); a request that cannot get one within it is not sent and is recorded as refused.
   * Undefined: no limit (so that it survives the JSON of the worker channel, where `Infinity` would not).
   */
  readonly maxDelayMs: number | undefined;
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
  'fallback-pause-ms': { type: 'string' },
  'timeout-ms': { type: 'string' },
  'max-delay-ms': { type: 'string' },
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

/**
 * Old spellings of `run` flags, read for one more minor version (docs/cli.md): each prints one
 * deprecation line naming the new flag, which has the name of the library's option.
 */
export const RENAMED_RUN_FLAGS = {
  'max-wait': 'max-delay-ms',
  timeout: 'timeout-ms',
  'retry-delay': 'fallback-pause-ms',
} as const satisfies Readonly<Record<string, keyof typeof RUN_FLAGS>>;

/**
 * Flags users write for a flag of the command, by what they mean (the library's names and other
 * tools' names among them): an unknown flag is answered with the flag meant before the closest by
 * spelling (`--wait` → `--max-delay-ms`, where spelling says `--name`). Compared without case, `-` and `_`.
 */
export const RUN_SYNONYMS: Readonly<Record<string, string>> = {
  '--max-delay': '--max-delay-ms',
  '--max-wait-ms': '--max-delay-ms',
  '--wait': '--max-delay-ms',
  '--wait-ms': '--max-delay-ms',
  '--max-wait-time': '--max-delay-ms',
  '--slot-timeout': '--max-delay-ms',
  '--deadline': '--max-delay-ms',
  '--limit': '--rule',
  '--limits': '--rule',
  '--rate': '--rule',
  '--rate-limit': '--rule',
  '--rules': '--rule',
  '--quota': '--rule',
  '--request-timeout': '--timeout-ms',
  '--timeout-s': '--timeout-ms',
  '--max-hold-ms': '--timeout-ms',
  '--retry-delay-ms': '--fallback-pause-ms',
  '--retry-wait': '--fallback-pause-ms',
  '--retry-interval': '--fallback-pause-ms',
  '--backoff': '--fallback-pause-ms',
  '--backoff-ms': '--fallback-pause-ms',
  '--pause': '--fallback-pause-ms',
  '--max-retries': '--retries',
  '--retry': '--retries',
  '--attempts': '--retries',
  '--max-attempts': '--retries',
  '--parallel': '--concurrency',
  '--parallelism': '--concurrency',
  '--in-flight': '--concurrency',
  '--max-in-flight': '--concurrency',
  '--jobs': '--concurrency',
  '-j': '--concurrency',
  '--processes': '--workers',
  '--threads': '--workers',
  '--user': '--key',
  '--key-field': '--key',
  '--partition': '--key',
  '--output': '--out',
  '--results': '--out',
  '--continue': '--resume',
  '--force': '--overwrite',
  '--replace': '--overwrite',
  '--silent': '--quiet',
  '--namespace': '--name',
  '--redis-url': '--redis',
  '--store': '--redis',
  '--key-prefix': '--prefix',
  '--host': '--base-url',
  '--endpoint': '--base-url',
  '--input-format': '--format',
};

/** {@link RUN_SYNONYMS} of `inspect`. */
export const INSPECT_SYNONYMS: Readonly<Record<string, string>> = {
  '--limit': '--top',
  '--count': '--top',
  '-n': '--top',
  '--rate': '--rule',
  '--rules': '--rule',
  '--namespace': '--name',
  '--redis-url': '--redis',
  '--key-prefix': '--prefix',
  '--format': '--json',
  '--output': '--json',
};

/** The input file name that means standard input. */
export const STDIN = '-';

/** `--help` asked for: the caller prints the command's help and exits 0. */
export const HELP = Symbol('help');

/** Writes a deprecation line to stderr. */
const stderrLine = (line: string): void => void process.stderr.write(`vendor-throttle: ${line}\n`);

/**
 * Parses and checks the flags of `vendor-throttle run`. Throws `ThrottleConfigError` (exit 2) saying
 * which flag is wrong and why, with the flag as its `argument`. An old spelling of a flag
 * ({@link RENAMED_RUN_FLAGS}) is read as the new one, and `warn` gets one deprecation line for it.
 */
export function parseRunArgs(args: readonly string[], warn: (line: string) => void = stderrLine): RunOptions | typeof HELP {
  const { values, positionals, spelt } = parseRenamed(args, warn);
  if (values.help) return HELP;
  if (positionals.length !== 1) {
    throw new ThrottleConfigError(
      positionals.length === 0
        ? "run: missing the input file (NDJSON or CSV; '-' reads standard input)"
        : `run: expected one input file, got ${positionals.length}: ${positionals.join(' ')}`,
      '<file>',
    );
  }
  const file = positionals[0]!;
  // Standard input has no name to tell the format by: NDJSON unless --format says otherwise.
  const format = values.format ?? (file !== STDIN && /\.csv$/i.test(file) ? 'csv' : 'ndjson');
  if (format !== 'ndjson' && format !== 'csv') throw new ThrottleConfigError(`--format: expected 'ndjson' or 'csv', got '${format}'`, '--format');
  // One waiting discipline; 'queue' and 'delay' name it as version 0.1 did.
  const mode = values.mode ?? 'wait';
  if (mode !== 'wait' && mode !== 'delay' && mode !== 'queue')
    throw new ThrottleConfigError(`--mode: expected 'wait' (the only waiting mode; 'queue' and 'delay' are read as it), got '${mode}'`, '--mode');
  if (values.resume && values.overwrite) throw new ThrottleConfigError('--resume and --overwrite exclude each other', '--overwrite');
  if ((values.resume || values.overwrite) && values.out === undefined) {
    const flag = values.resume ? '--resume' : '--overwrite';
    throw new ThrottleConfigError(`${flag} needs --out <results file>`, flag);
  }
  if (values.cluster && values.redis === undefined) throw new ThrottleConfigError('--cluster needs --redis <url of a cluster node>', '--cluster');
  const keys = values.key ?? [];
  if (keys.some((key) => key.trim() === ''))
    throw new ThrottleConfigError('--key: expected a template such as {user_id}, header:x-user, query:user or path:2', '--key');
  const tag = hashTag(values['hash-tag']);
  if (values['hash-tag'] !== undefined && values.redis === undefined)
    throw new ThrottleConfigError('--hash-tag needs --redis <url> (it names the layout of the keys in Redis)', '--hash-tag');
  if (keys.length > 1 && values.cluster && tag !== 'name') {
    throw new ThrottleConfigError(
      "--key given more than once on a Redis Cluster needs --hash-tag name (every key of the throttle in one slot; the services that share it must use RedisStore { hashTag: 'name' } too)",
      '--key',
    );
  }
  if (keys.length > 1 && values.redis === undefined && (values.workers ?? '1') !== '1') {
    throw new ThrottleConfigError(
      '--key given more than once with --workers: keys shared by requests of every worker (an app-wide key) need --redis to share their limits',
      '--key',
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
      fallbackPauseMs: duration(spelt('fallback-pause-ms'), values['fallback-pause-ms'] ?? '1000'),
      timeoutMs: duration(spelt('timeout-ms'), values['timeout-ms'] ?? '30000', 1),
      maxDelayMs: values['max-delay-ms'] === undefined ? undefined : duration(spelt('max-delay-ms'), values['max-delay-ms']),
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
  const { values, positionals } = parse(args, INSPECT_FLAGS, 'inspect', INSPECT_SYNONYMS);
  if (values.help) return HELP;
  if (values.redis === undefined) throw new ThrottleConfigError('inspect: --redis <url> is required (inspect reads the shared log in Redis)', '--redis');
  if (positionals.length > 1) throw new ThrottleConfigError(`inspect: expected at most one key, got ${positionals.length}: ${positionals.join(' ')}`, '<key>');
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

/** The old spellings, parsed as the flags they were. */
const OLD_RUN_FLAGS = Object.fromEntries(Object.keys(RENAMED_RUN_FLAGS).map((name) => [name, { type: 'string' }])) as {
  readonly [Name in keyof typeof RENAMED_RUN_FLAGS]: { readonly type: 'string' };
};

type Renamed = (typeof RENAMED_RUN_FLAGS)[keyof typeof RENAMED_RUN_FLAGS];

/** The flags that have an old spelling. */
const RENAMED: ReadonlySet<string> = new Set<Renamed>(Object.values(RENAMED_RUN_FLAGS));

/**
 * The flags of `run`, an old spelling read as its new flag (in the order given: the last of the two
 * wins, as for a flag given twice); `spelt(name)` is the flag as the user wrote it, for messages.
 */
function parseRenamed(args: readonly string[], warn: (line: string) => void) {
  // Old spellings are not offered as suggestions for an unknown flag.
  const { values, positionals, tokens } = parse(args, { ...RUN_FLAGS, ...OLD_RUN_FLAGS }, 'run', RUN_SYNONYMS, Object.keys(RUN_FLAGS));
  const written = new Map<string, string>();
  const warned = new Set<string>();
  for (const token of tokens) {
    if (token.kind !== 'option') continue;
    const old = Object.hasOwn(RENAMED_RUN_FLAGS, token.name) ? (token.name as keyof typeof RENAMED_RUN_FLAGS) : undefined;
    const name = old === undefined ? token.name : RENAMED_RUN_FLAGS[old];
    if (old !== undefined) {
      if (!warned.has(old)) warn(`--${old} is deprecated: use --${name} (the same value; a bare number is ms); --${old} goes in the next minor version`);
      warned.add(old);
      delete values[old];
    }
    if (RENAMED.has(name)) values[name as Renamed] = token.value;
    written.set(name, token.name);
  }
  return { values, positionals, spelt: (name: string): string => `--${written.get(name) ?? name}` };
}

function parse<T extends NonNullable<ParseArgsConfig['options']>>(
  args: readonly string[],
  options: T,
  command: string,
  synonyms: Readonly<Record<string, string>>,
  offered: readonly string[] = Object.keys(options),
) {
  try {
    return parseArgs({ args: [...args], options, allowPositionals: true, strict: true, tokens: true });
  } catch (error) {
    const message = error instanceof Error ? error.message.split('. To specify a positional')[0]! : String(error);
    // The flag the message is about: `'--bogus'`, `'-r, --rule <value>'`, `'-j'`.
    const flag = /'(?:-\w, )?(--?[^' =,]+)/.exec(message)?.[1] ?? command;
    // An unknown flag: name the one meant (`--max-delay-ms` for `--max-wait-ms`), else the closest (`--rule` for `--rul`).
    const hint = /^Unknown option /.test(message)
      ? suggestName(
          flag,
          offered.map((name) => `--${name}`),
          synonyms,
        )
      : undefined;
    throw new ThrottleConfigError(
      `${command}: ${message}${hint === undefined ? '' : ` (did you mean '${hint}'?)`} (see vendor-throttle ${command} --help)`,
      flag,
    );
  }
}

function rules(values: readonly string[] | undefined, required: boolean): string[] {
  if (required && !(values ?? []).some((rule) => splitRule(rule).key === undefined)) {
    throw new ThrottleConfigError(
      'run: at least one --rule is required, for every key, e.g. --rule 30/min (and --rule app=1000/min for a key of its own)',
      '--rule',
    );
  }
  return (values ?? []).map((given) => {
    const { key, rule } = splitRule(given);
    if (key === '') throw new ThrottleConfigError(`--rule '${given}': expected a key before '=', as in app=1000/min`, '--rule');
    try {
      parseRule(rule as RuleString);
    } catch (error) {
      throw new ThrottleConfigError(`--rule '${given}': ${(error as Error).message}`, '--rule');
    }
    return given;
  });
}

/** Throws the library's `ThrottleConfigError`, whose `argument` is the flag. */
function namespace(flag: string, value: string): string {
  return checkNamespace(flag, value);
}

function whole(flag: string, text: string, min: number, max: number): number {
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || value < min || value > max) {
    throw new ThrottleConfigError(`${flag}: expected a whole number from ${min} to ${max}, got '${text}'`, flag);
  }
  return value;
}

const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?$/;
const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, min: 60_000, h: 3_600_000 };

/** The value of a `-ms` flag: `500` (a bare number is ms, as the library's option), or with a unit: `500ms`, `30s`, `2m`, `1h`. */
export function duration(flag: string, text: string, min = 0): number {
  const match = DURATION.exec(text.trim());
  const ms = match ? Math.round(Number(match[1]) * UNIT_MS[match[2] ?? 'ms']!) : NaN;
  if (!(ms >= min) || ms > 86_400_000) {
    throw new ThrottleConfigError(
      `${flag}: expected a number of ms${min > 0 ? ` from ${min}` : ''} such as 500, or a duration such as 30s or 2m, up to a day, got '${text}'`,
      flag,
    );
  }
  return ms;
}

function httpUrl(flag: string, text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ThrottleConfigError(`${flag}: expected an absolute http(s) URL, got '${text}'`, flag);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ThrottleConfigError(`${flag}: expected an http or https URL, got '${text}'`, flag);
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
    throw new ThrottleConfigError(`--redis: expected a URL such as redis://127.0.0.1:6379 or rediss://user:password@host:6380/0, got '${text}'`, '--redis');
  }
  return text;
}

function headerFlags(values: readonly string[]): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const value of values) {
    const colon = value.indexOf(':');
    const name = colon > 0 ? value.slice(0, colon).trim() : '';
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new ThrottleConfigError(`--header: expected 'Name: value', got '${value}'`, '--header');
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
  throw new ThrottleConfigError(
    `--hash-tag: expected 'key' or 'name' (as the RedisStore option hashTag of the services sharing the limits), got '${value}'`,
    '--hash-tag',
  );
}
