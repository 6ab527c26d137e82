/**
 * Where a call's CPU goes, and which modules one call runs.
 *
 *   npx tsx scripts/bench/profile.ts                 # every part, about 30 s
 *   npx tsx scripts/bench/profile.ts --calls=50000   # calls of the profiled run (default 50,000)
 *   npx tsx scripts/bench/profile.ts --modules       # only the module map
 *
 * 1. Profile: one process sends `--calls` calls over 10,000 keys, 256 in flight, a rule that never
 *    binds, on a RedisStore (its own redis-server on a free port), under the V8 CPU profiler
 *    (`node:inspector`, as `node --cpu-prof` records). Prints worker CPU per call, the self time by
 *    file (garbage collection and microtasks included) and the top functions.
 * 2. Module map: the library's modules that run code during one `schedule()` on a fresh key, from
 *    V8's precise coverage (a function counts when it ran at least once during the call; modules
 *    only loaded, type-only imports and Lua do not count).
 * 3. Memory: this process's heap (after a full garbage collection) before, after 100,000 calls on
 *    100,000 distinct keys, and once those keys have idled past their window: what the throttle
 *    keeps per key must go with the key.
 */
import { Session } from 'node:inspector/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Redis } from 'ioredis';
import type { Throttle as ThrottleType } from '../../lib/index.js';
import { DIST_DIR, library, libraryDir } from '../support/library.js';
import { startRedis } from '../support/redis-server.js';
import { cleanUpOnSignal, readFlags, settingsOrUsage, UsageError } from '../support/usage.js';

const { RedisStore, Throttle } = library;
/** Where the library's modules were loaded from: dist/ (compiled, as users run it), else lib/ (scripts/support/library.ts). */
const LIB = `${libraryDir}/`;
const KEYS = 10_000;
const CONCURRENCY = 256;

interface Settings {
  readonly calls: number;
  readonly modulesOnly: boolean;
}

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const USAGE = 'Usage: npx tsx scripts/bench/profile.ts [--calls=50000] [--modules]';

function parseSettings(argv: readonly string[]): Settings {
  const flags = readFlags(argv, ['calls', 'modules']);
  const text = flags.get('calls') ?? '50000';
  const calls = Number(text);
  if (!Number.isInteger(calls) || calls < 1000) throw new UsageError(`Expected --calls to be a whole number ≥ 1000, got '${text}'`);
  return { calls, modulesOnly: flags.get('modules') === 'true' };
}

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
}

/** A file's short name: lib/…, node_modules/<package>, or what V8 calls it ((garbage collector), (program)). */
function fileOf(url: string, functionName: string): string {
  if (url === '') return functionName;
  const path = url.replace(/^file:\/\//, '');
  // A compiled module is named as its source (dist/x.js is lib/x.ts).
  if (path.startsWith(LIB)) return `lib/${LIB === `${DIST_DIR}/` ? path.slice(LIB.length).replace(/\.js$/, '.ts') : path.slice(LIB.length)}`;
  const inModules = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
  if (inModules) return `node_modules/${inModules[1]}`;
  return path.startsWith('node:') ? path : path.replace(/.*\/(scripts|spec)\//, '$1/');
}

/** Self time per file and per function, as shares of all samples. */
function summarize(profile: { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] }): {
  files: Array<[string, number]>;
  functions: Array<[string, number]>;
} {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const files = new Map<string, number>();
  const functions = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    const { functionName, url, lineNumber } = nodes.get(id)!.callFrame;
    const file = fileOf(url, functionName);
    total += dt;
    files.set(file, (files.get(file) ?? 0) + dt);
    const fn = `${functionName || '(anonymous)'} ${file}${url ? `:${lineNumber + 1}` : ''}`;
    functions.set(fn, (functions.get(fn) ?? 0) + dt);
  });
  const shares = (map: Map<string, number>): Array<[string, number]> =>
    [...map].map(([name, t]): [string, number] => [name, t / total]).sort((a, b) => b[1] - a[1]);
  return { files: shares(files), functions: shares(functions) };
}

const percent = (share: number): string => `${(100 * share).toFixed(1).padStart(5)} %`;

/** Runs `calls` calls over KEYS keys, CONCURRENCY in flight. */
async function load(throttle: ThrottleType, calls: number, offset = 0): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < calls) {
      const i = next++;
      await throttle.schedule(`user-${(i + offset) % KEYS}`, noop);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
}

function noop(): void {}

async function profileRun(session: Session, url: string, calls: number): Promise<void> {
  const client = new Redis(url);
  const throttle = new Throttle({ name: 'profile', rules: ['1000/1s'], store: new RedisStore(client) });
  // Warm: every key once, scripts loaded, code optimized.
  await load(throttle, KEYS);
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 100 });
  const cpuBefore = process.cpuUsage();
  const startedAt = performance.now();
  await session.post('Profiler.start');
  await load(throttle, calls, KEYS);
  const { profile } = await session.post('Profiler.stop');
  const seconds = (performance.now() - startedAt) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  await throttle.close();
  client.disconnect();
  const cpuUs = (cpu.user + cpu.system) / calls;
  console.log(
    `## Profile: ${calls.toLocaleString('en')} calls over ${KEYS.toLocaleString('en')} keys, ${CONCURRENCY} in flight, one process, RedisStore, a rule that never binds\n`,
  );
  console.log(`${Math.round(calls / seconds).toLocaleString('en')} calls/s; worker CPU ${cpuUs.toFixed(1)} µs per call (user + sys, profiler on)\n`);
  const { files, functions } = summarize(profile as unknown as Parameters<typeof summarize>[0]);
  const gc = files.find(([name]) => name === '(garbage collector)')?.[1] ?? 0;
  const ours = files.filter(([name]) => name.startsWith('lib/')).reduce((sum, [, share]) => sum + share, 0);
  console.log(`garbage collection ${percent(gc).trim()}; the library's own modules ${percent(ours).trim()}\n`);
  console.log('| self time | file |\n| ---: | --- |');
  for (const [name, share] of files.slice(0, 20)) console.log(`| ${percent(share)} | ${name} |`);
  console.log('\n| self time | function |\n| ---: | --- |');
  for (const [name, share] of functions.slice(0, 15)) console.log(`| ${percent(share)} | ${name} |`);
  console.log();
}

/** The library's modules that ran code during one schedule() on a fresh key, in the order their first function is defined on the path. */
async function moduleMap(session: Session, url: string): Promise<void> {
  const client = new Redis(url);
  const throttle = new Throttle({ name: 'modules', rules: ['5/s'], store: new RedisStore(client) });
  // Everything loaded and set up; the first call on some other key has run once.
  await throttle.schedule('warm-up', noop);
  await session.post('Profiler.enable');
  await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
  await session.post('Profiler.takePreciseCoverage'); // resets the counts
  await throttle.schedule('fresh-key', noop);
  // The completion is written in the next batch: wait for it too.
  await new Promise((resolve) => setTimeout(resolve, 50));
  const { result } = await session.post('Profiler.takePreciseCoverage');
  await session.post('Profiler.stopPreciseCoverage');
  await throttle.close();
  client.disconnect();
  const ran = new Map<string, number>();
  for (const script of result) {
    if (!script.url.startsWith(`file://${LIB}`)) continue;
    // The module's top level (its first entry, the whole file) ran at load only, before the counts
    // were reset; every other function that ran counts, anonymous ones (arrows, callbacks) too.
    const functions = script.functions.slice(1).filter((fn) => fn.ranges[0]!.count > 0);
    if (process.env.MODULE_FUNCTIONS) console.error(fileOf(script.url, ''), functions.map((fn) => fn.functionName || '(anonymous)').join(' '));
    if (functions.length > 0) ran.set(fileOf(script.url, ''), functions.length);
  }
  console.log(`## Modules one schedule() on a fresh key runs (RedisStore, V8 precise coverage): ${ran.size}\n`);
  console.log('| module | functions that ran |\n| --- | ---: |');
  for (const [name, count] of [...ran].sort((a, b) => a[0].localeCompare(b[0]))) console.log(`| ${name} | ${count} |`);
  console.log();
}

/** Heap used after a full collection, in MB. */
function heapMb(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
}

async function memory(url: string): Promise<void> {
  const keys = 100_000;
  const windowMs = 1_000;
  const client = new Redis(url);
  const throttle = new Throttle({ name: 'memory', rules: [`5/${windowMs}ms`], store: new RedisStore(client) });
  await throttle.schedule('warm-up', noop);
  const before = heapMb();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < keys) await throttle.schedule(`key-${next++}`, noop);
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const loaded = heapMb();
  // Past the window and the recovery journal's heartbeat: every key idle.
  await new Promise((resolve) => setTimeout(resolve, windowMs + 1_500));
  const idle = heapMb();
  await throttle.close();
  client.disconnect();
  console.log(`## Memory: heap of one process (after a full collection), ${keys.toLocaleString('en')} calls on as many keys, rule 5/${windowMs}ms\n`);
  console.log('| when | heap used | per key |\n| --- | ---: | ---: |');
  console.log(`| before | ${before.toFixed(1)} MB | |`);
  console.log(
    `| right after the last call (the latest keys still inside their window) | ${loaded.toFixed(1)} MB | ${Math.round(((loaded - before) * 2 ** 20) / keys)} B |`,
  );
  console.log(`| once every key idled (${windowMs + 1_500} ms later) | ${idle.toFixed(1)} MB | ${Math.round(((idle - before) * 2 ** 20) / keys)} B |`);
  console.log();
}

async function main(): Promise<void> {
  const settings = settingsOrUsage(() => parseSettings(process.argv.slice(2)), USAGE);
  if (settings === undefined) return;
  const redis = await startRedis();
  const stopCleanUp = cleanUpOnSignal(() => redis.stop());
  const session = new Session();
  session.connect();
  try {
    if (!settings.modulesOnly) await profileRun(session, redis.url, settings.calls);
    await moduleMap(session, redis.url);
    if (!settings.modulesOnly) await memory(redis.url);
  } finally {
    session.disconnect();
    await redis.stop();
    stopCleanUp();
  }
}

await main();
