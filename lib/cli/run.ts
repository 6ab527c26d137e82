import { formatRule, parseRule } from '../index.js';
import { splitRule, STDIN, type RunOptions } from './args.js';
import { runBatch, type BatchOutcome } from './batch.js';
import { CliError, EXIT, errorText, type ExitCode } from './errors.js';
import { loadRequests, type BatchRequest } from './input.js';
import { compileKey } from './key-template.js';
import { formatSeconds, Progress, rulesOfRun } from './progress.js';
import { closeRedis, connectRedis, redact } from './redis.js';
import { isFailure, isRefused, openResults, readDone, type ResultLine, type ResultsSink } from './results.js';
import { openThrottle, type RecentCall } from './setup.js';
import { runWorkers } from './workers.js';
import type { RuleString } from '../rules.js';

/**
 * `vendor-throttle run`: reads and checks every request of the file or of standard input (nothing
 * is sent if one is bad), skips the ids the results file already holds (`--resume`; but not those
 * refused by `--max-delay-ms`, which are sent again), sends the rest through the throttle (in this
 * process or in `--workers` processes, which get their requests from this one), writes each result
 * as it comes, and says how it went.
 * SIGINT/SIGTERM: the first stops starting requests and lets those in flight finish and be written;
 * a second cancels those in flight too (written as interrupted). Resolves with the exit code.
 */
export async function run(options: RunOptions): Promise<ExitCode> {
  const say = (line: string): void => {
    if (!options.quiet) process.stderr.write(`vendor-throttle: ${line}\n`);
  };
  const requests = await loadRequests({
    file: options.file,
    format: options.format,
    key: compileKey(options.keys[0]),
    also: options.keys.slice(1).map(compileKey),
    baseUrl: options.baseUrl,
    headers: options.headers,
  });

  let todo: readonly BatchRequest[] = requests;
  let failedBefore = 0;
  let refusedBefore = 0;
  const recent: RecentCall[] = [];
  if (options.resume) {
    const done = await readDone(options.out!);
    if (done.repaired) say(`${options.out} ended with a line cut short (the run was killed while writing it): removed; that request is sent again`);
    // An id is done when its last line is an outcome; a refusal by --max-delay-ms is not one: sent again.
    todo = requests.filter((request) => {
      const result = done.results.get(String(request.id));
      return result === undefined || isRefused(result);
    });
    for (const request of requests) {
      const result = done.results.get(String(request.id));
      if (result === undefined) continue;
      if (isRefused(result)) refusedBefore += 1;
      else if (isFailure(result)) failedBefore += 1;
    }
    // Redis keeps the calls of the earlier run itself. Without it, every attempt a line records
    // counts (the earlier lines of an id sent again too); a request refused at once sent nothing.
    if (options.throttle.redis === undefined) {
      const byId = new Map(requests.map((request) => [String(request.id), request]));
      for (const line of done.lines) {
        const request = byId.get(String(line.id));
        if (request === undefined || line.attempts === 0 || typeof line.startedAt !== 'string') continue;
        const completedAt = Date.parse(line.startedAt) + (line.ms ?? 0);
        if (Number.isFinite(completedAt))
          recent.push({ key: request.key, also: request.also, completedAt, slots: Math.max(1, line.attempts ?? 1) * request.cost });
      }
    }
  }
  const skipped = requests.length - todo.length;
  const earlier = [
    ...(skipped > 0 ? [`${skipped} done earlier, skipped`] : []),
    ...(refusedBefore > 0 ? [`${refusedBefore} refused earlier by --max-delay-ms, sent again`] : []),
  ];
  const rules = options.throttle.rules
    .map((given) => {
      const { key, rule } = splitRule(given);
      return `${key === undefined ? '' : `${key}=`}${formatRule(parseRule(rule as RuleString))}`;
    })
    .join(', ');
  const keys = new Set(todo.map((request) => request.key)).size;
  const where =
    options.throttle.redis === undefined
      ? 'in-memory limits'
      : `limits shared through ${redact(options.throttle.redis)} (${options.throttle.prefix}:${options.throttle.name})`;
  say(
    `${todo.length} request${todo.length === 1 ? '' : 's'} for ${keys} key${keys === 1 ? '' : 's'}${earlier.length > 0 ? ` (${earlier.join('; ')})` : ''}; rules ${rules}; ${where}; ${options.workers > 1 ? `${options.workers} workers × ` : ''}concurrency ${options.send.concurrency}, ${options.throttle.mode} mode${options.send.maxDelayMs === undefined ? '' : `; at most ${options.send.maxDelayMs} ms waiting for a slot (--max-delay-ms)`}`,
  );
  if (options.workers > 1 && options.throttle.redis === undefined) {
    say(
      'without --redis each worker keeps the limits of its own keys in memory (a key stays in one worker): they hold within this run, but are not shared with other processes or machines',
    );
  }

  if (todo.length === 0) {
    const sink = openResults(options.out, options);
    await sink.close();
    say(`nothing to send: every request has a result in ${options.out}`);
    return failedBefore > 0 ? EXIT.failed : EXIT.ok;
  }

  const stop = new AbortController();
  const abort = new AbortController();
  let signals = 0;
  let progress: Progress | undefined;
  const onSignal = (signal: NodeJS.Signals): void => {
    signals += 1;
    if (signals === 1) {
      progress?.stop();
      say(`${signal}: stopping — no new requests; the ones in flight finish and are written (${signal} again cancels them)`);
      stop.abort(new Error(signal));
    } else {
      say(`${signal} again: cancelling the requests in flight (written as interrupted)`);
      abort.abort(new Error(signal));
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const started = performance.now();
  let failed = 0;
  let refused = 0;
  let sink: ResultsSink | undefined;
  let outcome: BatchOutcome;
  try {
    const onResult = (result: ResultLine): void => {
      sink!.write(result);
      const kind = isRefused(result) ? 'refused' : isFailure(result) ? 'failed' : 'ok';
      if (kind === 'refused') refused += 1;
      else if (kind === 'failed') failed += 1;
      progress?.tick(kind, result);
    };
    const begin = (): void => {
      sink = openResults(options.out, options);
      // The ETA comes from each key's requests and rules (and the calls of the earlier run still in their windows).
      const earlier = recent.map((call) => ({ key: call.key, also: call.also, slots: call.slots, agoMs: Date.now() - call.completedAt }));
      const plan = { requests: todo, rules: rulesOfRun(options.throttle.rules), concurrency: options.workers * options.send.concurrency, earlier };
      progress = new Progress({ total: todo.length, quiet: options.quiet, stream: process.stderr, plan });
    };
    if (options.workers > 1) {
      // Check Redis here, so that a wrong URL stops the run before any worker sends anything.
      if (options.throttle.redis !== undefined) await closeRedis(await connectRedis(options.throttle.redis, options.throttle.cluster));
      begin();
      outcome = await runWorkers(options.workers, todo, options.throttle, options.send, recent, { stop: stop.signal, abort: abort.signal }, onResult);
    } else {
      const opened = await openThrottle(options.throttle, options.send, recent);
      try {
        begin();
        outcome = await runBatch(opened.throttle, todo, options.send, { stop: stop.signal, abort: abort.signal }, onResult);
      } finally {
        await opened.close();
      }
    }
  } finally {
    progress?.stop();
    await sink?.close();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }

  const seconds = (performance.now() - started) / 1000;
  const left = todo.length - outcome.done;
  const again = options.file === STDIN ? ', piping in the same requests,' : '';
  const resumeHint = options.out === undefined ? '' : `; run again${again} with --resume --out ${options.out} to send the rest`;
  const sent = outcome.done - refused;
  const refusals =
    refused === 0
      ? ''
      : `; ${refused} refused: no slot within --max-delay-ms${options.out === undefined ? '' : ` (--resume --out ${options.out} sends them again${again ? ' from the same input' : ''})`}`;
  const summary = `${sent} sent in ${formatSeconds(seconds)} (${(sent / Math.max(seconds, 1e-3)).toFixed(1)}/s): ${sent - failed} ok, ${failed} failed${refusals}${skipped > 0 ? `; ${skipped} done earlier` : ''}${options.out === undefined ? '' : `; results in ${options.out}`}`;
  if (outcome.fatal !== undefined) {
    process.stderr.write(`vendor-throttle: ${outcome.fatal instanceof CliError ? outcome.fatal.message : `the run stopped: ${errorText(outcome.fatal)}`}\n`);
    process.stderr.write(`vendor-throttle: ${summary}; ${left} not sent${resumeHint}\n`);
    return EXIT.fatal;
  }
  if (signals > 0) {
    say(`interrupted: ${summary}; ${left} not sent${resumeHint}`);
    return EXIT.interrupted;
  }
  say(summary);
  return failed + refused + failedBefore > 0 ? EXIT.failed : EXIT.ok;
}
