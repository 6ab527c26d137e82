/**
 * One vocabulary from the library to the command: a flag that sets a library option has its name
 * (kebab-case, its unit), an old spelling still works with a deprecation line, an unknown name is
 * answered with the one meant (by meaning before spelling), and every bad argument — of the library
 * or of the command — is a `ThrottleConfigError` naming the argument.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { throttleProcessor } from '../lib/adapters/bullmq.js';
import { VENDOR_SIGNAL_OPTIONS } from '../lib/adapters/call-options.js';
import { INSPECT_FLAGS, parseInspectArgs, parseRunArgs, RENAMED_RUN_FLAGS, RUN_FLAGS, RUN_SYNONYMS } from '../lib/cli/args.js';
import { loadRequests } from '../lib/cli/input.js';
import { compileKey } from '../lib/cli/key-template.js';
import { openResults } from '../lib/cli/results.js';
import { ThrottleConfigError } from '../lib/errors.js';
import { MemoryStore, RedisStore, Throttle } from '../lib/index.js';
import { SCHEDULE_OPTIONS, THROTTLE_OPTIONS } from '../lib/options.js';
import { closestName } from '../lib/validate.js';
import { redisClient } from './support/hooks.js';
import { startHttpVendor, type Vendor } from './support/http-vendor.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MAIN = join(ROOT, 'lib/cli/main.ts');

/** `maxDelayMs` → `max-delay-ms`. */
const kebab = (name: string): string => name.replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`);

/** What `fn` threw (or the promise it returned rejected with). */
async function thrown(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  throw new Error('nothing was thrown');
}

/** Parses `run` flags; `warnings` gets the deprecation lines. */
function parseRun(args: readonly string[]): { options: ReturnType<typeof parseRunArgs>; warnings: string[] } {
  const warnings: string[] = [];
  return { options: parseRunArgs(args, (line) => warnings.push(line)), warnings };
}

/** Flags `run` has for an option of the library, with the option (and where it is one). */
const LIBRARY_FLAGS: ReadonlyArray<[flag: string, option: string, of: readonly string[]]> = [
  ['max-delay-ms', 'maxDelayMs', SCHEDULE_OPTIONS],
  ['timeout-ms', 'timeoutMs', THROTTLE_OPTIONS],
  ['fallback-pause-ms', 'fallbackPauseMs', VENDOR_SIGNAL_OPTIONS],
  ['retries', 'retries', VENDOR_SIGNAL_OPTIONS],
  ['name', 'name', THROTTLE_OPTIONS],
  ['mode', 'mode', THROTTLE_OPTIONS],
  ['prefix', 'prefix', ['prefix']],
  ['hash-tag', 'hashTag', ['hashTag']],
];

describe('one vocabulary: the command speaks the library', function () {
  this.timeout(30_000);

  it("a flag that sets a library option has the option's name in kebab-case; the old spellings are not flags any more", () => {
    for (const [flag, option, of] of LIBRARY_FLAGS) {
      expect(of, option).to.include(option);
      expect(flag, option).to.equal(kebab(option));
      expect(Object.keys(RUN_FLAGS), flag).to.include(flag);
    }
    // `rules`, a list: one rule per --rule, repeatable.
    expect(THROTTLE_OPTIONS).to.include('rules');
    expect(RUN_FLAGS.rule).to.include({ multiple: true });
    for (const [old, renamed] of Object.entries(RENAMED_RUN_FLAGS)) {
      expect(Object.keys(RUN_FLAGS)).not.to.include(old);
      expect(LIBRARY_FLAGS.map(([flag]) => flag)).to.include(renamed);
    }
  });

  it("the renamed flags take the library's unit: a bare number is ms, a unit may be written", () => {
    const { options, warnings } = parseRun(['-r', '5/s', '--max-delay-ms', '1500', '--timeout-ms', '2000', '--fallback-pause-ms', '250', '-']);
    expect(options).to.have.property('send').that.deep.includes({ maxDelayMs: 1500, timeoutMs: 2000, fallbackPauseMs: 250 });
    expect(warnings).to.deep.equal([]);
    expect(parseRun(['-r', '5/s', '--max-delay-ms', '30s', '--timeout-ms=2m', '-']).options)
      .to.have.property('send')
      .that.deep.includes({ maxDelayMs: 30_000, timeoutMs: 120_000, fallbackPauseMs: 1_000 });
  });

  it('an old spelling still works, as its new flag, with one deprecation line naming the new flag', () => {
    const { options, warnings } = parseRun(['-r', '5/s', '--max-wait', '30s', '--timeout', '2m', '--retry-delay=50ms', '--max-wait', '45s', '-']);
    expect(options).to.have.property('send').that.deep.includes({ maxDelayMs: 45_000, timeoutMs: 120_000, fallbackPauseMs: 50 });
    expect(warnings).to.deep.equal([
      '--max-wait is deprecated: use --max-delay-ms (the same value; a bare number is ms); --max-wait goes in the next minor version',
      '--timeout is deprecated: use --timeout-ms (the same value; a bare number is ms); --timeout goes in the next minor version',
      '--retry-delay is deprecated: use --fallback-pause-ms (the same value; a bare number is ms); --retry-delay goes in the next minor version',
    ]);
    // Old and new spellings of one flag: the last given wins, as for a flag given twice.
    expect(parseRun(['-r', '5/s', '--max-wait', '30s', '--max-delay-ms', '100', '-']).options).to.have.nested.property('send.maxDelayMs', 100);
    expect(parseRun(['-r', '5/s', '--max-delay-ms', '100', '--max-wait', '30s', '-']).options).to.have.nested.property('send.maxDelayMs', 30_000);
    // A bad value names the flag as it was written.
    const error = (() => {
      try {
        return parseRun(['-r', '5/s', '--max-wait', 'soon', '-']);
      } catch (caught) {
        return caught;
      }
    })();
    expect(error).to.be.instanceOf(ThrottleConfigError).and.to.include({ argument: '--max-wait' });
    expect((error as Error).message).to.match(/^--max-wait: expected a number of ms/);
  });

  it('an old spelling runs end to end: the deprecation line on stderr, the refusal in the results under the new name', async () => {
    let vendor: Vendor | undefined;
    const dir = mkdtempSync(join(tmpdir(), 'vt-vocabulary-'));
    try {
      vendor = await startHttpVendor();
      const input = join(dir, 'requests.ndjson');
      writeFileSync(input, ['a', 'b'].map((id) => JSON.stringify({ id, url: `${vendor!.url}/x?user=ann`, key: 'ann' })).join('\n') + '\n');
      const out = join(dir, 'results.ndjson');
      const args = ['run', '-q', '--rule', '1/min', '--max-wait', '0', '--timeout', '5s', '--retry-delay', '10', '--out', out, input];
      const exit = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
        let stderr = '';
        child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
        child.once('close', (code) => resolve({ code, stderr }));
      });
      expect(exit.code, exit.stderr).to.equal(1);
      const lines = exit.stderr.trim().split('\n');
      expect(lines).to.deep.equal([
        'vendor-throttle: --max-wait is deprecated: use --max-delay-ms (the same value; a bare number is ms); --max-wait goes in the next minor version',
        'vendor-throttle: --timeout is deprecated: use --timeout-ms (the same value; a bare number is ms); --timeout goes in the next minor version',
        'vendor-throttle: --retry-delay is deprecated: use --fallback-pause-ms (the same value; a bare number is ms); --retry-delay goes in the next minor version',
      ]);
      const results = readFileSync(out, 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      expect(results.map((result) => result.id).sort()).to.deep.equal(['a', 'b']);
      const refused = results.filter((result) => result.refused !== undefined);
      expect(refused).to.have.length(1);
      expect(refused[0]!.refused).to.match(/^no slot within --max-delay-ms \(0 ms\): rule 1\/min is full/);
      expect(vendor.arrivals).to.have.length(1);
    } finally {
      await vendor?.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an unknown flag is answered with the flag meant, by meaning before spelling', () => {
    const flags = Object.keys(RUN_FLAGS).map((name) => `--${name}`);
    const meant = (args: string[], parse: (args: string[]) => unknown = (given) => parseRunArgs(given, () => undefined)): string | undefined => {
      try {
        parse(args);
      } catch (error) {
        expect(error)
          .to.be.instanceOf(ThrottleConfigError)
          .and.to.include({ argument: args[0]!.split('=')[0] });
        return /\(did you mean '([^']+)'\?\)/.exec((error as Error).message)?.[1];
      }
      throw new Error(`${args.join(' ')} was accepted`);
    };
    // The case: --max-delay was answered with --retry-delay, the closest by spelling then.
    expect(meant(['--max-delay', '30s', '-r', '5/s', '-'])).to.equal('--max-delay-ms');
    for (const [given, flag] of [
      ['--wait', '--max-delay-ms'],
      ['--max-wait-ms', '--max-delay-ms'],
      ['--maxDelayMs', '--max-delay-ms'],
      ['--max_delay_ms', '--max-delay-ms'],
      ['--limit', '--rule'],
      ['--rate', '--rule'],
      ['--rules', '--rule'],
      ['--max-hold-ms', '--timeout-ms'],
      ['--retry-delay-ms', '--fallback-pause-ms'],
      ['--backoff', '--fallback-pause-ms'],
      ['--max-retries', '--retries'],
      ['--parallel', '--concurrency'],
      ['--output', '--out'],
      ['--rul', '--rule'],
    ] as const) {
      expect(meant([given, '1', '-r', '5/s', '-']), given).to.equal(flag);
      expect(RUN_SYNONYMS[given] ?? flag, given).to.equal(flag);
    }
    // Where spelling alone would have answered another flag.
    expect(closestName('--wait', flags)).to.equal('--name');
    expect(closestName('--limit', flags)).to.equal('--format');
    expect(closestName('--max-hold-ms', flags)).to.equal('--max-delay-ms');
    expect(closestName('--retry-delay-ms', flags)).to.equal('--max-delay-ms');
    // inspect has its own: --limit is how many keys to show there.
    expect(meant(['--limit', '5', '--redis', 'redis://127.0.0.1:6379'], (args) => parseInspectArgs(args))).to.equal('--top');
    expect(Object.keys(INSPECT_FLAGS)).to.include('top');
    // Nothing near: no guess.
    expect(meant(['--zzzzzzzz', '1', '-r', '5/s', '-'])).to.equal(undefined);
  });

  it("the library's options too: maxWaitMs is answered maxDelayMs, not maxHoldMs (the closest by spelling)", async () => {
    const throttle = new Throttle({ rules: '5/s', store: new MemoryStore() });
    try {
      expect(closestName('maxWaitMs', THROTTLE_OPTIONS)).to.equal('maxHoldMs');
      for (const [fn, argument, meant] of [
        [() => new Throttle({ rules: '5/s', maxWaitMs: 100 } as never), 'maxWaitMs', 'maxDelayMs'],
        [() => new Throttle({ limit: '5/s' } as never), 'limit', 'rules'],
        [() => throttle.schedule('u', () => 1, { timeout: 5 } as never), 'timeout', 'timeoutMs'],
        [() => throttle.fetch({ key: () => 'u', retryDelay: 5 } as never), 'retryDelay', 'fallbackPauseMs'],
        [() => throttle.fetch({ key: () => 'u', maxRetries: 5 } as never), 'maxRetries', 'retries'],
      ] as const) {
        const error = await thrown(fn);
        expect(error, argument).to.be.instanceOf(ThrottleConfigError).and.to.include({ argument });
        expect((error as Error).message, argument).to.include(`(did you mean '${meant}'?)`);
      }
    } finally {
      await throttle.close();
    }
  });

  it('every bad argument is a ThrottleConfigError naming it: keys, learn(), schedule options, adapters, the BullMQ processor, stores', async () => {
    const throttle = new Throttle({ rules: '5/s', store: new MemoryStore() });
    const job = { id: '1', data: {}, attemptsStarted: 1, attemptsMade: 0, moveToDelayed: async () => undefined };
    try {
      const cases: ReadonlyArray<[what: string, fn: () => unknown, argument: string]> = [
        ['an empty key', () => throttle.schedule('', () => 1), 'key'],
        ['a key that is an object', () => throttle.schedule({} as never, () => 1), 'key'],
        ['an empty list of keys', () => throttle.schedule([], () => 1), 'key'],
        ['an empty key to inspect()', () => throttle.inspect(''), 'key'],
        ['an empty key to limit()', () => throttle.limit(''), 'key'],
        ['an empty key to learn()', () => throttle.learn('', { status: 200, headers: {} }), 'key'],
        ['learn() without headers', () => throttle.learn('u', { status: 429 } as never), 'response'],
        ['pause() for a negative time', () => throttle.pause('u', -1), 'ms'],
        ['fn not a function', () => throttle.schedule('u', 'nope' as never), 'fn'],
        ['schedule options not an object', () => throttle.schedule('u', () => 1, null as never), 'options'],
        ['a negative maxDelayMs', () => throttle.schedule('u', () => 1, { maxDelayMs: -1 }), 'maxDelayMs'],
        ['a cost of 0', () => throttle.schedule('u', () => 1, { cost: 0 }), 'cost'],
        ['a cost above the limit', () => throttle.schedule('u', () => 1, { cost: 6 }), 'cost'],
        ['a priority that is text', () => throttle.schedule('u', () => 1, { priority: 'high' } as never), 'priority'],
        ['a signal that is not one', () => throttle.schedule('u', () => 1, { signal: {} } as never), 'signal'],
        ['a bad rule', () => new Throttle({ rules: '5/mn' as never }), 'rules'],
        ['a bad maxHoldMs', () => new Throttle({ rules: '5/s', maxHoldMs: 0 }), 'maxHoldMs'],
        ['a bad name', () => new Throttle({ rules: '5/s', name: 'a:b' }), 'name'],
        ['learnAboveRules that is text', () => new Throttle({ rules: '5/s', learnAboveRules: 'yes' as never }), 'learnAboveRules'],
        ['learnedFloor of 0', () => new Throttle({ rules: '5/s', learnedFloor: 0 }), 'learnedFloor'],
        ['an empty key from wrap()', () => throttle.wrap(() => 1, { key: () => '' })(), 'key'],
        ['fetch() retries of -1', () => throttle.fetch({ key: () => 'u', retries: -1 }), 'retries'],
        ['fetch() fallbackPauseMs of Infinity', () => throttle.fetch({ key: () => 'u', fallbackPauseMs: Infinity }), 'fallbackPauseMs'],
        [
          'an empty key from fetch()',
          () => throttle.fetch({ key: () => '', fetch: async (_url: string) => new Response('') })('http://vendor.invalid/'),
          'key',
        ],
        ['axios() without an instance', () => throttle.axios(undefined as never, { key: () => 'u' }), 'instance'],
        ['throttleProcessor() without a processor', () => throttleProcessor(throttle, 'nope' as never, { key: () => 'u' }), 'processor'],
        ['throttleProcessor() waitMs of -1', () => throttleProcessor(throttle, async () => 1, { key: () => 'u', waitMs: -1 }), 'waitMs'],
        ['an empty key from a job', () => throttleProcessor(throttle, async () => 1, { key: () => '' })(job as never, undefined), 'key'],
        [
          'RedisStore recovery.graceMs below three heartbeats',
          () => new RedisStore(redisClient(), { recovery: { heartbeatMs: 500, graceMs: 1000 } }),
          'recovery.graceMs',
        ],
        ['RedisStore prefix', () => new RedisStore(redisClient(), { prefix: 'a{b}' }), 'prefix'],
      ];
      for (const [what, fn, argument] of cases) {
        const error = await thrown(fn);
        expect(error, what).to.be.instanceOf(ThrottleConfigError).and.to.include({ argument, code: 'ERR_THROTTLE_CONFIG' });
      }
    } finally {
      await throttle.close();
    }
  });

  it("the command's bad arguments are the same type: flags, the input file, the results file", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vt-vocabulary-'));
    try {
      const existing = join(dir, 'results.ndjson');
      writeFileSync(existing, '{"id":"x","status":200}\n');
      const cases: ReadonlyArray<[what: string, fn: () => unknown, argument: string]> = [
        ['inspect without --redis', () => parseInspectArgs(['cus_1']), '--redis'],
        ['inspect with two keys', () => parseInspectArgs(['--redis', 'redis://127.0.0.1:6379', 'a', 'b']), '<key>'],
        ['inspect --top 0', () => parseInspectArgs(['--redis', 'redis://127.0.0.1:6379', '--top', '0']), '--top'],
        ['a --key template with unbalanced braces', () => compileKey('{user'), '--key'],
        [
          'a missing input file',
          () => loadRequests({ file: join(dir, 'missing.ndjson'), format: 'ndjson', key: compileKey(undefined), baseUrl: undefined, headers: {} }),
          '<file>',
        ],
        ['a results file that holds results', () => openResults(existing, { resume: false, overwrite: false }), '--out'],
      ];
      for (const [what, fn, argument] of cases) {
        const error = await thrown(fn);
        expect(error, what).to.be.instanceOf(ThrottleConfigError).and.to.include({ argument });
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
