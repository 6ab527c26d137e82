import { closeSync, existsSync, fstatSync, fsyncSync, ftruncateSync, openSync, readSync, statSync, writeSync } from 'node:fs';
import { readJsonLines } from './json-lines.js';
import { ThrottleConfigError } from '../errors.js';
import { CliError, EXIT } from './errors.js';

/** One line of the results file: the outcome of one request, after its retries. */
export interface ResultLine {
  readonly id: string | number;
  readonly key: string;
  /** HTTP status of the last answer; null when there was none (network error, timeout, interrupted, never sent). */
  readonly status: number | null;
  /** When the last attempt was sent (ISO 8601, ms); null when it was never sent (refused by `--max-delay-ms`). */
  readonly startedAt: string | null;
  /** From sending the last attempt to the end of its response body, in ms; null when it was never sent. */
  readonly ms: number | null;
  /** Times the request was sent (1 + retries); 0 when its first attempt was refused. */
  readonly attempts: number;
  /** The response body: parsed when it is JSON, else text (left out with --no-body). */
  readonly body?: unknown;
  /** Why there is no answer. */
  readonly error?: string;
  /**
   * Why an attempt was not sent: it could not get a slot within `--max-delay-ms` (`rule 30/min is full`,
   * `the key is paused`, …). The request's last word is not in yet: `--resume` sends it again.
   */
  readonly refused?: string;
  /** With `refused`: ms until the slot the throttle could have given it, as the throttle saw it then. */
  readonly retryAfterMs?: number;
}

/**
 * A request that did not succeed: no answer, a status of 400 or more after its retries, or an
 * attempt refused by `--max-delay-ms`.
 */
export function isFailure(result: ResultLine): boolean {
  return result.error !== undefined || result.status === null || result.status >= 400 || isRefused(result);
}

/** An attempt was refused by `--max-delay-ms`: `--resume` sends the request again instead of skipping it. */
export function isRefused(result: ResultLine): boolean {
  return result.refused !== undefined;
}

/** Where results go, one JSON line each, written as they come. */
export interface ResultsSink {
  /** The results file; undefined for standard output. */
  readonly path: string | undefined;
  write(result: ResultLine): void;
  /** Flushes to disk (fsync) and closes. */
  close(): Promise<void>;
}

/**
 * Opens the results file: appends with `resume`, replaces it with `overwrite`, and refuses to touch
 * a non-empty file otherwise (its record of what was sent would be lost). No `path`: standard output.
 */
export function openResults(path: string | undefined, mode: { readonly resume: boolean; readonly overwrite: boolean }): ResultsSink {
  if (path === undefined) return stdoutSink();
  if (!mode.resume && !mode.overwrite && existsSync(path) && statSync(path).size > 0) {
    throw new ThrottleConfigError(
      `${path} already holds results: pass --resume to go on with that run (skipping the ids it holds), or --overwrite to start over`,
      '--out',
    );
  }
  let fd: number;
  try {
    fd = openSync(path, mode.resume ? 'a' : 'w');
  } catch (error) {
    throw new ThrottleConfigError(`cannot write ${path}: ${(error as Error).message}`, '--out');
  }
  let closed = false;
  return {
    path,
    write(result) {
      try {
        writeSync(fd, `${JSON.stringify(result)}\n`);
      } catch (error) {
        throw new CliError(`cannot write ${path}: ${(error as Error).message}`, EXIT.fatal);
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      try {
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    },
  };
}

function stdoutSink(): ResultsSink {
  let broken: Error | undefined;
  // A closed pipe (`| head`): stop the run rather than send requests whose results go nowhere.
  process.stdout.on('error', (error) => (broken ??= error));
  return {
    path: undefined,
    write(result) {
      if (broken !== undefined) throw new CliError(`cannot write results to standard output: ${broken.message}`, EXIT.fatal);
      process.stdout.write(`${JSON.stringify(result)}\n`);
    },
    close: () => new Promise<void>((resolve) => process.stdout.write('', () => resolve())),
  };
}

/** What an earlier run recorded: its results by id (as text), and whether a torn last line was cut. */
export interface DoneResults {
  /** The last line of each id: a request refused by `--max-delay-ms` and sent again by a `--resume` has two. */
  readonly results: Map<string, ResultLine>;
  /** Every line, in file order: each attempt any of them records counts against the rules. */
  readonly lines: readonly ResultLine[];
  readonly repaired: boolean;
}

/**
 * Reads the results of an earlier run for `--resume`. A last line cut short (the run was killed
 * while writing it) is removed from the file; any other bad line is an error (exit 2) naming
 * `file:line`. A missing file means nothing was done yet.
 */
export async function readDone(path: string): Promise<DoneResults> {
  const results = new Map<string, ResultLine>();
  const lines: ResultLine[] = [];
  if (!existsSync(path)) return { results, lines, repaired: false };
  const repaired = cutTornTail(path);
  for await (const { line: number, value, error } of readJsonLines(path)) {
    if (error) {
      throw new CliError(`${path}:${number}: not a result line (${error.message}); fix or remove that line, then resume`);
    }
    const id = (value as { id?: unknown } | null)?.id;
    if (typeof id !== 'string' && typeof id !== 'number') {
      throw new CliError(`${path}:${number}: a result line without an 'id'; is ${path} the results file of a vendor-throttle run?`);
    }
    results.set(String(id), value as ResultLine);
    lines.push(value as ResultLine);
  }
  return { results, lines, repaired };
}

/** Removes a last line that has no newline and is not JSON (a write cut short). */
function cutTornTail(path: string): boolean {
  const fd = openSync(path, 'r+');
  try {
    const size = fstatSync(fd).size;
    if (size === 0) return false;
    const last = Buffer.alloc(1);
    readSync(fd, last, 0, 1, size - 1);
    if (last[0] === 0x0a) return false;
    const start = lastLineStart(fd, size);
    const tail = Buffer.alloc(size - start);
    readSync(fd, tail, 0, tail.length, start);
    try {
      JSON.parse(tail.toString('utf8'));
      writeSync(fd, '\n', size);
      return false;
    } catch {
      ftruncateSync(fd, start);
      return true;
    }
  } finally {
    closeSync(fd);
  }
}

/** Offset of the first byte after the last newline of the file (0 when there is none). */
function lastLineStart(fd: number, size: number): number {
  const chunk = Buffer.alloc(64 * 1024);
  for (let end = size; end > 0;) {
    const from = Math.max(0, end - chunk.length);
    readSync(fd, chunk, 0, end - from, from);
    const newline = chunk.subarray(0, end - from).lastIndexOf(0x0a);
    if (newline !== -1) return from + newline + 1;
    end = from;
  }
  return 0;
}
