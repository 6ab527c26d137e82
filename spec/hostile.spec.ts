/**
 * Hostile and odd input, against the MemoryStore and the RedisStore (fast-check):
 * - any JSON-ish value for every Throttle option and every schedule option: only typed errors
 *   (ThrottleError subclasses, ThrottleConfigError for wrong types too, the abort reason; never
 *   StoreUnavailableError, since the store is healthy), fn called exactly for the calls that
 *   resolve, nothing left behind after close();
 * - any key (unicode, lone surrogates, `{`, `}`, `:`, `*`, newlines, 20,000 characters): every Redis
 *   key created starts with `<prefix>:<name>:`, and two different user ids never share state;
 * - interleavings of schedule, abort and close, with cost and maxDelayMs: typed errors only, and no
 *   window over the limit;
 * - never an unhandled rejection;
 * - option names that do not exist (removed ones, misspelt ones, Object.prototype's): ThrottleConfigError;
 * - numbers at the edge of what validation accepts: waits and timeouts past a 32-bit timer.
 *
 * The RedisStore runs on a redis-server this spec starts for itself, so that every key in it is one
 * the spec created (checked with SCAN, here only: the library never scans).
 */
import { expect } from 'chai';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import {
  QueueFullError,
  RateLimitedError,
  ReservationError,
  RedisStore,
  ThrottleClosedError,
  ThrottleConfigError,
  ThrottleError,
  Throttle,
  type Store,
  type ThrottleMode,
} from '../lib/index.js';
import { CallTimeoutError } from '../lib/errors.js';
import { SCHEDULE_OPTIONS, THROTTLE_OPTIONS } from '../lib/options.js';
import { startRedis, type RedisServer } from '../scripts/support/redis-server.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------
// Arbitraries

/** Numbers that break naive validation: signs, fractions, 32-bit and 53-bit edges, huge, non-finite. */
const oddNumber = fc.constantFrom(
  0,
  -0,
  -1,
  0.5,
  1,
  2,
  3,
  1e-9,
  99.99,
  2 ** 31 - 1,
  2 ** 31,
  2 ** 53,
  2 ** 53 + 2,
  1e21,
  1e300,
  Number.MAX_VALUE,
  Infinity,
  -Infinity,
  NaN,
);

/** Any JSON value, or one of the values JSON cannot hold. */
const jsonish: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  oddNumber,
  fc.constantFrom(undefined, null, true, '', '1', 'Infinity', [], {}, [1], () => 1, Symbol('odd'), 10n),
);

/** A value that is often valid for a numeric option and often not. */
const numberish = (valid: fc.Arbitrary<number>): fc.Arbitrary<unknown> => fc.oneof({ weight: 3, arbitrary: valid }, oddNumber, jsonish);

const ruleish: fc.Arbitrary<unknown> = fc.oneof(
  fc.tuple(fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: 200 })).map(([limit, ms]) => `${limit}/${ms}ms`),
  fc.constantFrom('1/s', '30/min', '10000/day', '2/1.5h', ' 3 / 20 ms ', '0/s', '1/0ms', '-1/s', '1/367d', '1/fortnight', '1e3/s', '30/min/s'),
  fc.record({ limit: numberish(fc.integer({ min: 1, max: 5 })), windowMs: numberish(fc.integer({ min: 1, max: 200 })) }, { requiredKeys: [] }),
  jsonish,
);

const rulesish: fc.Arbitrary<unknown> = fc.oneof(
  ruleish,
  fc.array(ruleish, { maxLength: 3 }),
  ruleish.map((rule) => () => rule),
  ruleish.map((rule) => async () => rule),
);

const validRule = fc.tuple(fc.integer({ min: 1, max: 5 }), fc.integer({ min: 5, max: 150 }));

/** Throttle options that work, with short windows so that calls are quick to settle. */
const validOptions = fc.record(
  {
    name: fc.stringMatching(/^[A-Za-z0-9._\-/]{1,12}$/),
    rules: fc.oneof(
      validRule.map(([limit, ms]) => `${limit}/${ms}ms`),
      fc.array(
        validRule.map(([limit, windowMs]) => ({ limit, windowMs })),
        { minLength: 1, maxLength: 2 },
      ),
      validRule.map(
        ([limit, ms]) =>
          (key: string) =>
            key.length % 2 === 0 ? `${limit}/${ms}ms` : [`${limit}/${ms}ms`, `${limit + 1}/${2 * ms}ms`],
      ),
    ),
    mode: fc.constantFrom('wait', 'throw', 'delay', 'queue'),
    maxDelayMs: fc.oneof(fc.integer({ min: 0, max: 100 }), fc.constant(Infinity)),
    timeoutMs: fc.oneof(fc.integer({ min: 0, max: 300 }), fc.constant(Infinity)),
    maxHoldMs: fc.integer({ min: 1, max: 300 }),
    retainMs: fc.integer({ min: 0, max: 300 }),
    maxQueued: fc.oneof(fc.integer({ min: 0, max: 4 }), fc.constant(Infinity)),
    bucketAbove: fc.constantFrom(0, 2, 1_000, Infinity),
    buckets: fc.integer({ min: 2, max: 60 }),
    onStoreError: fc.constantFrom('fail', 'wait', 'local'),
    localShare: fc.double({ min: 0.01, max: 1, noNaN: true }),
    learnedForMs: fc.integer({ min: 1_000, max: 3_600_000 }),
    learnAboveRules: fc.boolean(),
    learnedFloor: fc.integer({ min: 1, max: 100 }),
    telemetry: fc.boolean(),
    keyLabel: fc.constantFrom(undefined, (key: string) => key.slice(0, 1)),
  },
  { requiredKeys: ['rules'] },
);

/** Every option a throttle takes but the store (each run brings its own). */
type OptionName = Exclude<(typeof THROTTLE_OPTIONS)[number], 'store'>;
const OPTION_NAMES = THROTTLE_OPTIONS.filter((name): name is OptionName => name !== 'store');

/** The same fields, each anything at all (typed so that an option added to THROTTLE_OPTIONS needs an entry here). */
const hostileFields: { readonly [name in OptionName]: fc.Arbitrary<unknown> } = {
  name: fc.oneof(fc.constantFrom('', 'a:b', 'a{b}', 'x'.repeat(101), 'ünï', 'a b'), jsonish),
  rules: rulesish,
  mode: fc.oneof(fc.constantFrom('Delay', 'fifo', '', 'Wait'), jsonish),
  maxDelayMs: fc.oneof(oddNumber, jsonish),
  timeoutMs: fc.oneof(oddNumber, jsonish),
  maxHoldMs: fc.oneof(oddNumber, jsonish),
  retainMs: fc.oneof(oddNumber, jsonish),
  maxQueued: fc.oneof(oddNumber, jsonish),
  bucketAbove: fc.oneof(oddNumber, jsonish),
  buckets: fc.oneof(oddNumber, jsonish),
  onStoreError: fc.oneof(fc.constantFrom('FAIL', 'retry', ''), jsonish),
  localShare: fc.oneof(oddNumber, jsonish),
  learnedForMs: fc.oneof(oddNumber, jsonish),
  learnAboveRules: fc.oneof(fc.constantFrom(0, 1, 'true', 'false', ''), jsonish),
  learnedFloor: fc.oneof(oddNumber, jsonish),
  reservationGraceMs: fc.oneof(oddNumber, jsonish),
  telemetry: fc.oneof(fc.constantFrom(0, 1, 'true', 'false', ''), jsonish),
  keyLabel: fc.oneof(fc.constantFrom('key', 0, {}), jsonish),
};
const hostileOptions = fc.record(hostileFields);

/** Names no throttle or call takes: options of version 0.1, near misses, Object.prototype's own. */
const unknownOption = fc.constantFrom(
  'safetyMarginMs',
  'adaptiveMargin',
  'concurrency',
  'holdMs',
  'maxDelay',
  'maxdelayms',
  'timeout',
  'priority',
  'signal',
  'cost',
  'constructor',
  'toString',
  'hasOwnProperty',
  'valueOf',
  '',
  ' ',
  'rules ',
);

/**
 * Options that work, with up to two fields replaced by anything (or removed), and now and then a
 * field no throttle takes; now and then not an object at all.
 */
const throttleOptions: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 9,
    arbitrary: fc
      .tuple(
        validOptions,
        hostileOptions,
        fc.subarray(OPTION_NAMES, { maxLength: 2 }),
        fc.oneof({ weight: 19, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.tuple(unknownOption, jsonish) }),
      )
      .map(([valid, hostile, fields, unknown]) => {
        const options: Record<string, unknown> = { ...valid };
        for (const field of fields) options[field] = hostile[field];
        if (unknown) options[unknown[0]] = unknown[1];
        return options;
      }),
  },
  jsonish,
);

/** Pieces that keys are made of: separators, hash-tag braces, glob characters, escapes, unicode traps. */
const keyPiece = fc.constantFrom(
  '{',
  '}',
  '{}',
  ':',
  '*',
  '?',
  '[',
  ']',
  '\n',
  '\r\n',
  '\t',
  ' ',
  '%',
  '%7B',
  '%3A',
  '%%',
  '+',
  '/',
  '\\',
  '"',
  "'",
  '\0',
  '\uD800',
  '\uDBFF',
  '\uDC00',
  '\uDFFF',
  '\uFFFD',
  '\uFEFF',
  '😀',
  'é',
  'e\u0301',
  'İ',
  'ı',
  'ß',
  'SS',
  'ﬃ',
  'Ω',
  'Ω',
  'u:',
  'h:',
  'A',
  'a',
  '0',
  '-',
  '.',
  'vt',
  'log',
  'meta',
);
const keyUnit = fc.oneof(
  keyPiece,
  fc.string({ unit: 'binary', maxLength: 3 }),
  fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
);

/** Any string, with a bias for the characters that could forge or merge storage keys; now and then very long. */
const hostileKey: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: fc.array(keyUnit, { maxLength: 12 }).map((units) => units.join('')) },
  {
    weight: 1,
    arbitrary: fc.tuple(fc.array(keyUnit, { minLength: 1, maxLength: 4 }), fc.integer({ min: 150, max: 20_000 })).map(([units, length]) =>
      units
        .join('')
        .repeat(Math.ceil(length / Math.max(1, units.join('').length)))
        .slice(0, length),
    ),
  },
);

/** A user id `schedule()` takes: any string but the empty one (refused with a ThrottleConfigError). */
const userKey: fc.Arbitrary<string> = hostileKey.filter((key) => key !== '');

/** Two different user ids, often ones that differ only by case, normalization, encoding or a trailing character. */
const keyPair: fc.Arbitrary<[string, string]> = fc.oneof(
  fc.tuple(userKey, userKey),
  userKey.chain((key) =>
    fc.constantFrom<[string, string]>(
      [key, key.toUpperCase()],
      [key, key.toLowerCase()],
      [key, key.normalize('NFD')],
      [key, key.normalize('NFKC')],
      [key, encodeURIComponent(key.toWellFormed())],
      [key, key.toWellFormed()],
      [key, `${key} `],
      [key, `${key}\0`],
      [key, `{${key}}`],
      [key, `${key}:log`],
      [key, key.slice(0, -1)],
      [key, `${key.slice(0, -1)}${String.fromCharCode(((key.charCodeAt(key.length - 1) || 0) + 1) % 0x10000)}`],
    ),
  ),
  fc.constantFrom<[string, string]>(
    ['a', 'A'],
    ['é', 'e\u0301'],
    ['a b', 'a%20b'],
    ['a b', 'a+b'],
    ['%41', 'A'],
    [' ', '  '],
    ['\0', ' '],
    ['\uD800', '\uFFFD'],
    ['\uD800', 'u:d800'],
    ['\uD800', '\uD800\uD800'],
    ['\uD800\uDC00', '\uDC00\uD800'],
    ['1', '1.0'],
    ['0', '-0'],
    ['{a}', 'a'],
    ['a}:{b', 'a:b'],
    ['x'.repeat(200), 'x'.repeat(201)],
    [`${'x'.repeat(300)}a`, `${'x'.repeat(300)}b`],
  ),
);

const scheduleOptions: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record(
      {
        cost: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 1, max: 3 }) }, oddNumber, jsonish),
        maxDelayMs: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 0, max: 50 }) }, oddNumber, jsonish),
        // fn returns at once: no timeout, however short, may fire before it.
        timeoutMs: fc.oneof({ weight: 8, arbitrary: fc.integer({ min: 0, max: 50 }) }, oddNumber, jsonish),
        priority: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: -5, max: 5 }) }, oddNumber, jsonish),
        signal: fc.oneof({ weight: 4, arbitrary: fc.constantFrom('live', 'aborted') }, jsonish),
        // Not a token from reserve() (cut, forged, or not a string), and mostly left out: a call with
        // any other token is refused, and enough calls must run.
        token: fc.oneof(
          { weight: 12, arbitrary: fc.constant(undefined) },
          fc.constantFrom('vt1.', 'vt1.e30', 'vt1.eyJuIjoieCJ9', 'vt2.abc'),
          fc.string().map((text) => `vt1.${Buffer.from(text).toString('base64url')}`),
          jsonish,
        ),
      } satisfies { readonly [name in (typeof SCHEDULE_OPTIONS)[number]]: fc.Arbitrary<unknown> },
      { requiredKeys: [] },
    ),
  },
  {
    weight: 1,
    // A name schedule() does not take (a throttle option, a removed one, a misspelt one).
    arbitrary: fc
      .tuple(
        unknownOption.filter((name) => !(SCHEDULE_OPTIONS as readonly string[]).includes(name)),
        jsonish,
      )
      .map(([name, value]) => ({ [name]: value })),
  },
  { weight: 2, arbitrary: jsonish },
);

// ---------------------------------------------------------------------------------------------
// Checks

/** The only ways a call may fail against a healthy store; `abortReasons` are the reasons of the signals it was given. */
function expectTypedFailure(error: unknown, abortReasons: readonly unknown[]): void {
  if (abortReasons.includes(error)) return;
  const allowed = [ThrottleConfigError, RateLimitedError, QueueFullError, ThrottleClosedError, ReservationError];
  if (allowed.some((type) => error instanceof type)) return;
  const cause = error instanceof ThrottleError ? ` (cause: ${String(error.cause)})` : '';
  expect.fail(`unexpected rejection: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}${cause}`);
}

/** Most slots (by cost) started in any window of `windowMs − slackMs`, per key. */
function mostInWindow(starts: ReadonlyArray<{ at: number; cost: number }>, windowMs: number, slackMs: number): number {
  const sorted = [...starts].sort((x, y) => x.at - y.at);
  let most = 0;
  let sum = 0;
  let lo = 0;
  for (const start of sorted) {
    sum += start.cost;
    while (sorted[lo]!.at <= start.at - (windowMs - slackMs)) sum -= sorted[lo++]!.cost;
    most = Math.max(most, sum);
  }
  return most;
}

/** Waits for every promise, failing the property if one is still pending after `ms` (a hung call). */
async function settleWithin<T>(promises: ReadonlyArray<Promise<T>>, ms: number): Promise<Array<PromiseSettledResult<T>>> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`a call was still pending ${ms} ms after close()`)), ms);
  });
  try {
    return await Promise.race([Promise.allSettled(promises), hung]);
  } finally {
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------

describe('hostile input (fast-check)', function () {
  this.timeout(60_000);

  let server: RedisServer;
  let client: Redis;
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => {
    unhandled.push(reason);
  };
  /** `<prefix>:<name>:` of every throttle run on a RedisStore, for the key check. */
  const namespaces = new Set<string>();
  let prefixes = 0;

  /** A RedisStore with a prefix of its own, so that no run sees another's keys. */
  function redisStore(options: { commandTimeoutMs?: number } = {}): RedisStore {
    prefixes += 1;
    return new RedisStore(client, { prefix: `vt-hostile-${prefixes}`, ...options });
  }

  /** Notes where a throttle keeps its keys; closes it and its store (a store passed in is never closed by a throttle). */
  async function closeAll(throttle: Throttle | undefined, store: Store | undefined): Promise<void> {
    if (throttle && store instanceof RedisStore) namespaces.add(`${store.prefix}:${throttle.name}:`);
    await throttle?.close();
    await store?.close();
  }

  before(async function () {
    this.timeout(20_000);
    process.on('unhandledRejection', onUnhandled);
    server = await startRedis();
    client = new Redis(server.url);
  });

  after(async () => {
    await client?.quit();
    await server?.stop();
    process.off('unhandledRejection', onUnhandled);
  });

  afterEach(async () => {
    // Rejections are reported as unhandled after the microtask queue drains.
    await sleep(20);
    expect(unhandled.map(String), 'unhandled rejections').to.deep.equal([]);
  });

  /** Each run gets a store of its own: the throttle's default MemoryStore, or a RedisStore with a new prefix. */
  const subjects: Array<{ name: string; store: () => Store | undefined }> = [
    { name: 'MemoryStore', store: () => undefined },
    { name: 'RedisStore', store: () => redisStore() },
  ];

  for (const subject of subjects) {
    describe(`on the ${subject.name}`, () => {
      it('any Throttle options, keys and schedule options: only typed errors, fn runs exactly for the calls that resolve, nothing left after close()', async () => {
        const seen = { runs: 0, built: 0, resolved: 0, rejected: 0 };
        await fc.assert(
          fc.asyncProperty(
            throttleOptions,
            fc.array(fc.tuple(fc.oneof({ weight: 4, arbitrary: hostileKey }, jsonish), scheduleOptions), { minLength: 1, maxLength: 4 }),
            async (options, calls) => {
              seen.runs += 1;
              const store = subject.store();
              let throttle: Throttle;
              try {
                throttle = new Throttle(options !== null && typeof options === 'object' ? ({ ...options, store } as never) : (options as never));
              } catch (error) {
                await store?.close();
                expect(error, String(error)).to.be.instanceOf(ThrottleConfigError);
                return;
              }
              seen.built += 1;
              const names = Object.keys(options as object);
              expect(
                names.filter((name) => !(THROTTLE_OPTIONS as readonly string[]).includes(name)),
                'option names a throttle does not take',
              ).to.deep.equal([]);
              const ran: unknown[] = [];
              const abortReasons: unknown[] = [];
              const pending = calls.map(([key, callOptions], i) => {
                let perCall = callOptions;
                if (perCall !== null && typeof perCall === 'object' && 'signal' in perCall && (perCall.signal === 'live' || perCall.signal === 'aborted')) {
                  const controller = new AbortController();
                  if (perCall.signal === 'aborted') controller.abort(new Error(`aborted ${i}`));
                  else setTimeout(() => controller.abort(), 5 * i);
                  abortReasons.push(controller.signal);
                  perCall = { ...perCall, signal: controller.signal };
                }
                const fn = (): number => {
                  ran.push(i);
                  return i;
                };
                return throttle.schedule(key as string, fn, perCall as never);
              });
              // Every abort reason, read once the signals have fired.
              const reasons = (): unknown[] => abortReasons.map((signal) => (signal as AbortSignal).reason);
              // Long enough for a first decision on Redis (the namespace's epoch, then one batch).
              await Promise.race([Promise.allSettled(pending), sleep(100)]);
              await closeAll(throttle, store);
              const outcomes = await settleWithin(pending, 2_000);
              outcomes.forEach((outcome, i) => {
                seen[outcome.status === 'fulfilled' ? 'resolved' : 'rejected'] += 1;
                if (outcome.status === 'fulfilled') {
                  const given = calls[i]![1];
                  const names = given !== null && typeof given === 'object' ? Object.keys(given) : [];
                  expect(
                    names.filter((name) => !(SCHEDULE_OPTIONS as readonly string[]).includes(name)),
                    'option names schedule() does not take',
                  ).to.deep.equal([]);
                  expect(outcome.value, 'resolves with what fn returned').to.equal(i);
                  expect(
                    ran.filter((call) => call === i),
                    `fn of call ${i} ran once`,
                  ).to.have.length(1);
                } else {
                  expectTypedFailure(outcome.reason, reasons());
                  expect(ran, `fn of rejected call ${i} never ran`).not.to.include(i);
                }
              });
              expect(throttle.stats).to.deep.equal({ queues: 0, queued: 0, sleeping: 0 });
            },
          ),
          {
            numRuns: 300,
            // Whole numbers as large as validation accepts, always tried first (the fuzz finds them only now and then).
            examples: (['maxDelayMs', 'timeoutMs', 'maxHoldMs', 'retainMs', 'maxQueued', 'bucketAbove', 'buckets'] as const).map(
              (field): [unknown, Array<[unknown, unknown]>] => [{ rules: '5/s', [field]: 1e21 }, [['k', {}]]],
            ),
          },
        );
        console.log(`      ${JSON.stringify(seen)}`);
        expect(seen.built, 'throttles built').to.be.above(seen.runs / 4);
        // Enough calls ran for the property to say something about them (most options are refused).
        expect(seen.resolved, 'calls that ran').to.be.above(seen.runs / 30);
      });

      it('two different user ids never share state: using up one never delays or refuses the other', async () => {
        let run = 0;
        await fc.assert(
          fc.asyncProperty(keyPair, async ([a, b]) => {
            fc.pre(a !== b && a !== '' && b !== '');
            const store = subject.store();
            const throttle = new Throttle({ name: `pair-${(run += 1)}`, rules: [{ limit: 2, windowMs: 60_000 }], mode: 'throw', store });
            try {
              const fn = (): string => 'ran';
              expect(await throttle.schedule(a, fn)).to.equal('ran');
              expect(await throttle.schedule(a, fn)).to.equal('ran');
              const refused = await throttle.schedule(a, fn).catch((error: unknown) => error);
              expect(refused, 'a is used up').to.be.instanceOf(RateLimitedError);
              expect((refused as RateLimitedError).key).to.equal(a);
              const other = await throttle.inspect(b);
              expect(other.rules[0]!.used, 'b has nothing counted').to.equal(0);
              expect(other.nextFreeInMs).to.equal(0);
              expect(await throttle.schedule(b, fn)).to.equal('ran');
              expect(await throttle.schedule(b, fn)).to.equal('ran');
              expect((await throttle.inspect(a)).rules[0]!.used, 'b did not free a').to.equal(2);
            } finally {
              await closeAll(throttle, store);
            }
          }),
          { numRuns: 120 },
        );
      });

      it('interleaved schedule, abort and close, with cost and maxDelayMs: typed errors only, no window over the limit', async () => {
        const action = fc.oneof(
          {
            weight: 5,
            arbitrary: fc.record({
              kind: fc.constant('schedule' as const),
              key: fc.nat(2),
              cost: fc.integer({ min: 1, max: 4 }),
              maxDelayMs: fc.option(fc.constantFrom(0, 10, 40, Infinity), { nil: undefined }),
              priority: fc.integer({ min: -2, max: 2 }),
              signal: fc.constantFrom('none', 'live', 'aborted'),
            }),
          },
          { weight: 2, arbitrary: fc.record({ kind: fc.constant('abort' as const), target: fc.nat(), custom: fc.boolean() }) },
          { weight: 2, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 25 }) }) },
          { weight: 1, arbitrary: fc.record({ kind: fc.constant('close' as const) }) },
        );
        let run = 0;
        await fc.assert(
          fc.asyncProperty(
            fc.record({
              mode: fc.constantFrom<ThrottleMode>('wait', 'throw', 'delay', 'queue'),
              rules: fc.array(fc.record({ limit: fc.integer({ min: 1, max: 3 }), windowMs: fc.integer({ min: 20, max: 80 }) }), { minLength: 1, maxLength: 2 }),
              maxHoldMs: fc.constantFrom(30, 200, 10_000),
              maxQueued: fc.constantFrom(0, 1, 3, Infinity),
              keys: fc.uniqueArray(userKey, { minLength: 3, maxLength: 3 }),
              actions: fc.array(action, { minLength: 1, maxLength: 12 }),
            }),
            async ({ mode, rules, maxHoldMs, maxQueued, keys, actions }) => {
              const store = subject.store();
              const throttle = new Throttle({ name: `seq-${(run += 1)}`, rules, mode, maxHoldMs, maxQueued, store });
              const calls: Array<{ promise: Promise<unknown>; controller: AbortController | undefined; key: string; cost: number }> = [];
              const starts = new Map<string, Array<{ at: number; cost: number }>>();
              const ran = new Set<number>();
              let closing: Promise<void> | undefined;
              for (const step of actions) {
                if (step.kind === 'schedule') {
                  const controller = step.signal === 'none' ? undefined : new AbortController();
                  if (step.signal === 'aborted') controller!.abort();
                  const key = keys[step.key]!;
                  const index = calls.length;
                  const promise = throttle.schedule(
                    key,
                    () => {
                      ran.add(index);
                      const list = starts.get(key) ?? [];
                      list.push({ at: performance.now(), cost: step.cost });
                      starts.set(key, list);
                      return index;
                    },
                    { cost: step.cost, maxDelayMs: step.maxDelayMs, priority: step.priority, signal: controller?.signal },
                  );
                  promise.catch(() => {}); // Looked at below; not unhandled in the meantime.
                  calls.push({ promise, controller, key, cost: step.cost });
                } else if (step.kind === 'abort') {
                  const target = calls[step.target % Math.max(1, calls.length)]?.controller;
                  if (step.custom) target?.abort(new Error('custom reason'));
                  else target?.abort();
                } else if (step.kind === 'wait') {
                  await sleep(step.ms);
                } else {
                  closing ??= throttle.close();
                }
              }
              await Promise.race([Promise.allSettled(calls.map((call) => call.promise)), sleep(100)]);
              await closing;
              await closeAll(throttle, store);
              const outcomes = await settleWithin(
                calls.map((call) => call.promise),
                2_000,
              );
              const smallest = Math.min(...rules.map((rule) => rule.limit));
              outcomes.forEach((outcome, i) => {
                const call = calls[i]!;
                if (outcome.status === 'fulfilled') {
                  expect(outcome.value).to.equal(i);
                  expect(ran.has(i)).to.equal(true);
                } else {
                  expect(ran.has(i), `fn of rejected call ${i} never ran`).to.equal(false);
                  const reason: unknown = outcome.reason;
                  if (reason instanceof ThrottleConfigError) expect(call.cost, 'config error only for a cost above the limit').to.be.above(smallest);
                  expectTypedFailure(reason, call.controller ? [call.controller.signal.reason] : []);
                  if (call.controller?.signal.aborted && !(reason instanceof ThrottleError)) expect(reason).to.equal(call.controller.signal.reason);
                }
              });
              // Starts are read on this process's clock, a slot's start on the store's: allow 2 ms (timers fire up to 1 ms early).
              for (const [key, list] of starts) {
                for (const rule of rules) {
                  expect(mostInWindow(list, rule.windowMs, 2), `starts of ${JSON.stringify(key).slice(0, 40)} in a ${rule.windowMs} ms window`).to.be.at.most(
                    rule.limit,
                  );
                }
              }
              expect(throttle.stats).to.deep.equal({ queues: 0, queued: 0, sleeping: 0 });
            },
          ),
          { numRuns: 40 },
        );
      });
    });
  }

  describe('afterwards, on the Redis server', () => {
    /** The part of a key Redis Cluster hashes: the first `{…}` with at least one character inside, else the whole key. */
    function hashTag(key: string): string {
      const open = key.indexOf('{');
      const close = open < 0 ? -1 : key.indexOf('}', open + 1);
      return close > open + 1 ? key.slice(open + 1, close) : key;
    }

    it('every key the RedisStore created starts with <prefix>:<name>:, and a key with braces has a hash tag Redis Cluster uses', async () => {
      // The empty user id is refused before anything reaches Redis (the first property generates it often).
      const store = redisStore();
      const throttle = new Throttle({ name: 'empty-id', rules: ['5/s'], store });
      let ran = false;
      const refused = await throttle.schedule('', () => (ran = true)).catch((error: unknown) => error);
      expect(refused).to.be.instanceOf(ThrottleConfigError);
      expect((refused as Error).message).to.match(/non-empty/);
      expect(ran).to.equal(false);
      expect(await throttle.inspect('').catch((error: unknown) => error)).to.be.instanceOf(ThrottleConfigError);
      await closeAll(throttle, store);
      expect(await client.keys(`${store.prefix}:empty-id:*`), 'keys of the empty id').to.deep.equal([]);
      const keys: string[] = [];
      for (let cursor = '0'; ;) {
        const [next, batch] = await client.scan(cursor, 'COUNT', 1000);
        keys.push(...batch);
        cursor = next;
        if (cursor === '0') break;
      }
      expect(namespaces.size, 'throttles run on Redis').to.be.above(10);
      expect(keys.length, 'keys created').to.be.above(10);
      for (const key of keys) {
        const shown = JSON.stringify(key).slice(0, 120);
        const namespace = [...namespaces].find((candidate) => key.startsWith(candidate));
        expect(namespace, `${shown} is under the <prefix>:<name>: of a throttle that ran`).to.be.a('string');
        const rest = key.slice(namespace!.length);
        if (rest.includes('{') || rest.includes('}')) {
          // The log, meta and flight keys of one user id must share a Cluster slot: an empty `{}` is no hash tag.
          expect(rest, `${shown}: one hash tag with no brace inside`).to.match(/^\{[^{}]*\}:[a-z]+$/);
          expect(hashTag(key), `${shown}: the hash tag Redis Cluster sees`).to.equal(rest.slice(1, rest.indexOf('}')));
        }
      }
    });
  });

  describe('waits longer than a 32-bit timer', () => {
    // Node's setTimeout takes at most 2^31 − 1 ms (24.8 days) and fires after 1 ms for anything longer.
    // Rules accept windows of up to 366 days and pauses any finite length.
    it('a slot 30 days away is waited for, not started after 1 ms', async () => {
      const throttle = new Throttle({ rules: ['1/30d'] });
      let ran = 0;
      const first = throttle.schedule('k', () => (ran += 1));
      const second = throttle.schedule('k', () => (ran += 1));
      await first;
      await sleep(50);
      const ranBeforeClose = ran;
      await throttle.close();
      await second.catch(() => undefined);
      expect(ranBeforeClose, 'calls started within 50 ms under 1/30d').to.equal(1);
    });

    it('a timeoutMs above 2^31 − 1 ms does not time a call out after 1 ms; one within a timer still does', async () => {
      const throttle = new Throttle({ rules: ['5/s'], timeoutMs: 2 ** 31 });
      const slow = (): Promise<string> => new Promise((resolve) => setTimeout(() => resolve('ran'), 30));
      expect(await throttle.schedule('k', slow)).to.equal('ran');
      expect(await throttle.schedule('k', slow, { timeoutMs: 2 ** 40 })).to.equal('ran');
      const timedOut = await throttle.schedule('k', slow, { timeoutMs: 5 }).catch((error: unknown) => error);
      expect(timedOut).to.be.instanceOf(CallTimeoutError);
      await throttle.close();
    });

    it('a RedisStore with commandTimeoutMs above 2^31 − 1 ms still waits for Redis', async () => {
      const store = redisStore({ commandTimeoutMs: 2 ** 31 });
      const throttle = new Throttle({ rules: ['5/s'], store });
      // Redis holds writes (the scripts write) for 20 ms: far below the timeout, and above 1 ms.
      await client.call('CLIENT', 'PAUSE', '20', 'WRITE');
      const result = await throttle.schedule('k', () => 'ran').catch((error: unknown) => String(error));
      await closeAll(throttle, store);
      expect(result).to.equal('ran');
    });
  });
});
