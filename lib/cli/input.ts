import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { parse as parseCsv } from 'csv-parse';
import { STDIN } from './args.js';
import { ThrottleConfigError } from '../errors.js';
import { CliError } from './errors.js';
import { readJsonLines } from './json-lines.js';
import type { KeyReader } from './key-template.js';

/** One request of the batch, checked and ready to send. */
export interface BatchRequest {
  /** The `id` field, else the line number: what `--resume` recognises a request by. */
  readonly id: string | number;
  /** Line of the input file the request is on (its last line, for a CSV record over several lines). */
  readonly line: number;
  readonly key: string;
  /** More keys the request counts in (the second `--key` on, such as an app-wide key); empty for none. */
  readonly also: readonly string[];
  readonly method: string;
  readonly url: string;
  /** Lower-case names. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | undefined;
  /** Slots the request takes (`cost` field). */
  readonly cost: number;
}

export interface InputOptions {
  /** A file, or `-` (`STDIN`): read `stdin`. */
  readonly file: string;
  readonly format: 'ndjson' | 'csv';
  readonly key: KeyReader;
  /** Readers of more keys each request counts in. @default none */
  readonly also?: readonly KeyReader[];
  readonly baseUrl: string | undefined;
  /** `--header` values, lower-case names. */
  readonly headers: Readonly<Record<string, string>>;
  /** What `-` reads. @default process.stdin */
  readonly stdin?: Readable & { readonly isTTY?: boolean };
}

/** Problems reported at most, one line each, before "… and N more". */
const MAX_PROBLEMS = 10;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * Reads and checks every request of an NDJSON or CSV file — or of standard input, for `-` — before
 * anything is sent. Throws `CliError` (exit 2) naming `file:line` (`stdin:line`) and the reason for
 * each bad line (the first 10), for duplicate ids and for input without requests; and
 * `ThrottleConfigError` (a bad argument, `<file>`) for a missing or unreadable file, and for `-`
 * when standard input is a terminal (nobody is piping requests in: waiting for them would look like a hang).
 */
export async function loadRequests(options: InputOptions): Promise<BatchRequest[]> {
  const fromStdin = options.file === STDIN;
  const name = fromStdin ? 'stdin' : options.file;
  const stdin = options.stdin ?? process.stdin;
  if (fromStdin && stdin.isTTY) {
    throw new ThrottleConfigError(
      "'-' reads the requests from standard input, which is a terminal here: pipe them in (jq -c … | vendor-throttle run … -) or give the file name",
      '<file>',
    );
  }
  const requests: BatchRequest[] = [];
  const problems: string[] = [];
  let problemCount = 0;
  const report = (line: number, why: string): void => {
    problemCount += 1;
    if (problems.length < MAX_PROBLEMS) problems.push(`${name}:${line}: ${why}`);
  };
  const seen = new Map<string, number>();
  const add = (line: number, fields: Record<string, unknown>): void => {
    try {
      const request = toRequest(line, fields, options);
      const first = seen.get(String(request.id));
      if (first !== undefined) throw new Error(`duplicate id ${JSON.stringify(request.id)} (first on line ${first}); ids must be unique for --resume`);
      seen.set(String(request.id), line);
      requests.push(request);
    } catch (error) {
      report(line, (error as Error).message);
    }
  };
  const source = fromStdin ? stdin : options.file;
  try {
    if (options.format === 'csv') await readCsv(source, add, report);
    else await readNdjson(source, add, report);
  } catch (error) {
    throw new ThrottleConfigError(`cannot read ${name}: ${readError(error)}`, '<file>');
  }
  if (problemCount > 0) {
    const more = problemCount > problems.length ? `\n… and ${problemCount - problems.length} more` : '';
    throw new CliError(`${problemCount} bad request${problemCount === 1 ? '' : 's'} in ${name}, nothing was sent:\n${problems.join('\n')}${more}`);
  }
  if (requests.length === 0)
    throw new CliError(
      `${name}: no requests found (expected ${options.format === 'csv' ? 'a header row and one row per request' : 'one JSON object per line'})`,
    );
  return requests;
}

type Add = (line: number, fields: Record<string, unknown>) => void;
type Report = (line: number, why: string) => void;

/** A file's path, or a stream (standard input). */
type Source = string | Readable;

async function readNdjson(source: Source, add: Add, report: Report): Promise<void> {
  for await (const { line, value, error } of readJsonLines(source)) {
    if (error) {
      report(line, `not valid JSON (${error.message})`);
      continue;
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      report(line, `expected a JSON object such as {"url": "https://…", "key": "user-1"}, got ${Array.isArray(value) ? 'an array' : JSON.stringify(value)}`);
      continue;
    }
    add(line, value as Record<string, unknown>);
  }
}

async function readCsv(source: Source, add: Add, report: Report): Promise<void> {
  const input = typeof source === 'string' ? createReadStream(source) : source;
  const parser = input.pipe(parseCsv({ columns: (header: string[]) => header.map((name) => name.trim()), bom: true, skip_empty_lines: true, info: true }));
  // pipe() does not pass on the input's errors (a missing file): end the parse with them.
  input.once('error', (error: Error) => parser.destroy(error));
  try {
    for await (const { record, info } of parser as AsyncIterable<{ record: Record<string, string>; info: { lines: number } }>) {
      const fields: Record<string, unknown> = {};
      // Empty cells count as absent, so that optional columns may be left blank.
      for (const [name, value] of Object.entries(record)) if (value !== '') fields[name] = value;
      add(info.lines, fields);
    }
  } catch (error) {
    const lines = (error as { lines?: unknown }).lines;
    if (typeof lines !== 'number' || (error as { code?: unknown }).code === 'ENOENT') throw error;
    report(lines, `not valid CSV (${(error as Error).message})`);
  }
}

function toRequest(line: number, fields: Record<string, unknown>, options: InputOptions): BatchRequest {
  const id = fields.id ?? line;
  if (!((typeof id === 'string' && id !== '') || (typeof id === 'number' && Number.isFinite(id)))) {
    throw new Error(`'id' must be a non-empty string or a number, got ${JSON.stringify(id)}`);
  }
  const url = requestUrl(fields.url, options.baseUrl);
  const headers = { ...options.headers, ...requestHeaders(fields.headers) };
  let body: string | undefined;
  if (typeof fields.body === 'string') body = fields.body;
  else if (fields.body !== undefined && fields.body !== null) {
    body = JSON.stringify(fields.body);
    headers['content-type'] ??= 'application/json';
  }
  const method = fields.method ?? (body === undefined ? 'GET' : 'POST');
  if (typeof method !== 'string' || !TOKEN.test(method)) throw new Error(`'method' must be an HTTP method such as GET or POST, got ${JSON.stringify(method)}`);
  const upper = method.toUpperCase();
  if (body !== undefined && (upper === 'GET' || upper === 'HEAD')) throw new Error(`a ${upper} request cannot have a body`);
  const rawCost = fields.cost;
  const cost = rawCost === undefined ? 1 : typeof rawCost === 'number' || typeof rawCost === 'string' ? Number(rawCost) : NaN;
  if (!Number.isInteger(cost) || cost < 1) throw new Error(`'cost' must be a whole number from 1 up, got ${JSON.stringify(rawCost)}`);
  const key = options.key({ fields, url, headers });
  const also = (options.also ?? []).map((read) => read({ fields, url, headers }));
  return { id: id as string | number, line, key, also, method: upper, url: url.href, headers, body, cost };
}

function requestUrl(value: unknown, baseUrl: string | undefined): URL {
  if (typeof value !== 'string' || value === '') throw new Error(`'url' is missing${baseUrl === undefined ? '' : ' (it may be relative to --base-url)'}`);
  let url: URL;
  try {
    url = new URL(value, baseUrl);
  } catch {
    throw new Error(`'url' is not an absolute URL: '${value}'${baseUrl === undefined ? ' (pass --base-url for relative ones)' : ''}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`'url' must be http or https, got '${value}'`);
  return url;
}

/** `headers`: an object (NDJSON) or its JSON text (CSV), values strings or numbers; names made lower-case. */
function requestHeaders(value: unknown): Record<string, string> {
  if (value === undefined || value === null) return {};
  let object = value;
  if (typeof value === 'string') {
    try {
      object = JSON.parse(value);
    } catch {
      throw new Error(`'headers' must be a JSON object such as {"authorization": "Bearer …"}, got '${value.length > 60 ? `${value.slice(0, 57)}...` : value}'`);
    }
  }
  if (object === null || typeof object !== 'object' || Array.isArray(object)) throw new Error(`'headers' must be an object of header names to values`);
  const headers: Record<string, string> = {};
  for (const [name, text] of Object.entries(object)) {
    if (!TOKEN.test(name)) throw new Error(`'headers' has an invalid header name ${JSON.stringify(name)}`);
    if (typeof text !== 'string' && typeof text !== 'number') throw new Error(`header '${name}' must be a string or a number, got ${JSON.stringify(text)}`);
    headers[name.toLowerCase()] = String(text);
  }
  return headers;
}

function readError(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  if (code === 'ENOENT') return 'no such file';
  if (code === 'EISDIR') return 'it is a directory';
  if (code === 'EACCES') return 'permission denied';
  return error instanceof Error ? error.message : String(error);
}
