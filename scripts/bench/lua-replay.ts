/**
 * The batch script's Redis CPU, variant against variant, on the very batches a real run sent.
 *
 *   npx tsx scripts/bench/lua-replay.ts capture [--out=/tmp/vt-cost.capture]
 *   npx tsx scripts/bench/lua-replay.ts replay [--in=/tmp/vt-cost.capture] [--rounds=3] LUA_DIR...
 *
 * capture: runs scripts/compare.ts's cost scenario (10,000 keys, 2 processes × 256 calls in flight)
 * for vendor-throttle with its workers talking to a private redis-server through a TCP proxy that
 * records what they send; writes every command to a file (one JSON line each: the connection, the
 * arguments in base64), in the order the proxy received them.
 *
 * replay: for each round and each LUA_DIR in turn (a `lib/lua` directory: its batch.lua and
 * includes, assembled as lib/stores/redis-scripts.ts does), empties a private redis-server, puts
 * the namespace's epoch and mark in place as the captured batches knew them (the epoch naming this
 * Redis), and sends the captured EVALSHAs of the batch script, pipelined, with the variant's SHA1.
 * Times in the batches' fields (numbers above 1e12: witnesses' scores, their ends, completions) are
 * moved by the time between the capture and the replay, so that the batches meet the state they met.
 * Prints per variant Redis CPU (`INFO cpu`) and time inside EVALSHA (`INFO commandstats`), µs per
 * decided call, and the median over rounds. Never touches a Redis it did not start.
 */
import { createReadStream, readFileSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import { createHash } from 'node:crypto';
import { createInterface } from 'node:readline';
import { Redis } from 'ioredis';
import { WorkerPool } from '../compare/pool.js';
import { runOne } from '../compare/runner.js';
import { scenarios } from '../compare/scenarios.js';
import { idleCpu } from '../compare/redis-usage.js';
import { scripts } from '../../lib/stores/redis-scripts.js';
import { startRedis } from '../support/redis-server.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: string): string => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const positional = args.filter((a) => !a.startsWith('--'));

interface Captured {
  conn: number;
  at: number;
  args: Buffer[];
}

/** Parses RESP arrays of bulk strings from BUF starting at 0; returns the commands and the bytes used. */
function parseCommands(buf: Buffer): { commands: Buffer[][]; used: number } {
  const commands: Buffer[][] = [];
  let at = 0;
  outer: while (at < buf.length) {
    if (buf[at] !== 0x2a) throw new Error(`not an array at ${at}: ${buf.subarray(at, at + 20).toString()}`);
    let eol = buf.indexOf('\r\n', at);
    if (eol < 0) break;
    const count = Number(buf.subarray(at + 1, eol).toString());
    let p = eol + 2;
    const parts: Buffer[] = [];
    for (let k = 0; k < count; k++) {
      if (p >= buf.length) break outer;
      eol = buf.indexOf('\r\n', p);
      if (eol < 0) break outer;
      const len = Number(buf.subarray(p + 1, eol).toString());
      const start = eol + 2;
      if (start + len + 2 > buf.length) break outer;
      parts.push(Buffer.from(buf.subarray(start, start + len)));
      p = start + len + 2;
    }
    commands.push(parts);
    at = p;
  }
  return { commands, used: at };
}

async function capture(): Promise<void> {
  const out = flag('out', '/tmp/vt-cost.capture');
  const server = await startRedis();
  const pool = new WorkerPool(2);
  const control = new Redis({ host: '127.0.0.1', port: server.port, maxRetriesPerRequest: 1 });
  const captured: Captured[] = [];
  const sockets = new Set<Socket>();
  let conns = 0;
  const proxy = createServer((client) => {
    const conn = ++conns;
    const upstream = connect(server.port, '127.0.0.1');
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    let pending: Buffer = Buffer.alloc(0);
    client.on('data', (chunk: Buffer) => {
      upstream.write(chunk);
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      const { commands, used } = parseCommands(pending);
      const at = performance.now();
      for (const c of commands) captured.push({ conn, at, args: c });
      pending = Buffer.from(pending.subarray(used));
    });
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const proxyPort = (proxy.address() as { port: number }).port;
  try {
    const idleCpuPerSecond = await idleCpu(control, 1000);
    const ctx = { pool, control, redisPort: proxyPort, idleCpuPerSecond, sequence: 0 };
    const scenario = scenarios(false).find((s) => s.id === 'cost')!;
    // --measure-ms: a longer run than compare.ts's 3 s, for the steady state (logs that fold).
    const measureMs = Number(flag('measure-ms', '0'));
    const cost = measureMs > 0 && scenario.shape.kind === 'closed' ? { ...scenario, shape: { ...scenario.shape, measureMs } } : scenario;
    const outcome = await runOne(ctx, cost, 'vendor-throttle');
    process.stderr.write(`captured run: ${outcome.calls} calls, ${outcome.redisCpuUsPerCall?.toFixed(2)} µs Redis CPU per call (through the proxy)\n`);
    const replid = /master_replid:(\w+)/.exec(await control.info('replication'))![1]!;
    const lines = [JSON.stringify({ replid, wall: Date.now() - performance.now() })];
    for (const c of captured) lines.push(JSON.stringify({ c: c.conn, t: c.at, a: c.args.map((b) => b.toString('base64')) }));
    writeFileSync(out, `${lines.join('\n')}\n`);
    process.stderr.write(`${captured.length} commands written to ${out}\n`);
  } finally {
    for (const s of sockets) s.destroy();
    proxy.close();
    await pool.stop();
    control.disconnect();
    await server.stop();
  }
}

/** batch.lua of DIR, assembled as lib/stores/redis-scripts.ts assembles lib/lua's. */
function assemble(dir: string): string {
  const own = readFileSync(new URL('../../lib/lua/batch.lua', import.meta.url), 'utf8');
  const codes = scripts.batch.lua.slice(0, scripts.batch.lua.indexOf(own.slice(0, 200)));
  const source = readFileSync(`${dir}/batch.lua`, 'utf8');
  return `${codes}${source}`.replace(/^--- @include "([a-z-]+)"$/gm, (_l, name: string) => readFileSync(`${dir}/includes/${name}.lua`, 'utf8'));
}

type Field = number | string;

/** Decodes packNumbers' MessagePack array of numbers (and digits as text). */
function unpackNumbers(buf: Buffer): Field[] {
  if (buf[0] !== 0xdd) throw new Error('not an array32');
  const n = buf.readUInt32BE(1);
  const out: Field[] = [];
  let at = 5;
  for (let k = 0; k < n; k++) {
    const b = buf[at]!;
    if (b >= 0xa0 && b <= 0xbf) {
      out.push(buf.toString('latin1', at + 1, at + 1 + (b & 0x1f)));
      at += 1 + (b & 0x1f);
    } else if (b < 0x80) {
      out.push(b);
      at += 1;
    } else if (b === 0xd2) {
      out.push(buf.readInt32BE(at + 1));
      at += 5;
    } else if (b === 0xcb) {
      out.push(buf.readDoubleBE(at + 1));
      at += 9;
    } else throw new Error(`unexpected msgpack byte ${b.toString(16)}`);
  }
  return out;
}

function packAll(values: readonly Field[]): Buffer {
  const parts: Buffer[] = [Buffer.from([0xdd, 0, 0, 0, 0])];
  parts[0]!.writeUInt32BE(values.length, 1);
  for (const v of values) {
    if (typeof v === 'string') parts.push(Buffer.from([0xa0 | v.length]), Buffer.from(v, 'latin1'));
    else if (v >= 0 && v < 128 && Number.isInteger(v)) parts.push(Buffer.from([v]));
    else if (Number.isInteger(v) && v >= -(2 ** 31) && v < 2 ** 31) {
      const b = Buffer.alloc(5);
      b[0] = 0xd2;
      b.writeInt32BE(v, 1);
      parts.push(b);
    } else {
      const b = Buffer.alloc(9);
      b[0] = 0xcb;
      b.writeDoubleBE(v, 1);
      parts.push(b);
    }
  }
  return Buffer.concat(parts);
}

interface Batch {
  keys: Buffer[];
  argv: Buffer[];
  fields: Field[];
  /** Where in fields a member's number, a witness's score or a completion's time lies (sent as text from script version 25 on). */
  textual: number[];
  /** Calls decided in it (DECIDE counts). */
  calls: number;
  at: number;
}

async function loadCapture(file: string): Promise<{ replid: string; wall: number; batches: Batch[]; stats: string }> {
  let head: { replid: string; wall: number } | undefined;
  const batches: Batch[] = [];
  const names = new Map<string, number>();
  // The batch script's SHA1 as captured: the script the workers ran (the one EVALSHA'd most).
  const counts = new Map<string, number>();
  for await (const line of createInterface({ input: createReadStream(file) })) {
    const match = /^\{"c":\d+,"t":[\d.e+-]+,"a":\["RVZBTFNIQQ==","([^"]+)"/.exec(line);
    if (match) counts.set(match[1]!, (counts.get(match[1]!) ?? 0) + 1);
  }
  const batchSha = Buffer.from([...counts].sort((x, y) => y[1] - x[1])[0]![0], 'base64').toString();
  const rl = createInterface({ input: createReadStream(file) });
  const opCount = new Map<number, number>();
  // The teardown's TIDY batches (a throttle closing) lie outside the measured run: left out unless --tidy.
  const skipTidy = !args.includes('--tidy');
  for await (const line of rl) {
    if (!line) continue;
    const o = JSON.parse(line) as { replid?: string; wall?: number; c: number; t: number; a: string[] };
    if (head === undefined) {
      head = o as { replid: string; wall: number };
      continue;
    }
    const a = o.a.map((s) => Buffer.from(s, 'base64'));
    const name = a[0]!.toString().toLowerCase();
    const tag = name === 'evalsha' ? `evalsha ${a[1]!.toString() === batchSha ? 'batch' : a[1]!.toString().slice(0, 8)}` : name;
    names.set(tag, (names.get(tag) ?? 0) + 1);
    if (name !== 'evalsha' || a[1]!.toString() !== batchSha) continue;
    const nkeys = Number(a[2]!.toString());
    const keys = a.slice(3, 3 + nkeys);
    const argv = a.slice(3 + nkeys);
    const fields = unpackNumbers(argv[4]!);
    // Count decided calls: walk the ops (codes as lib/stores/redis-scripts.ts CODES).
    const f = (at: number): number => Number(fields[at]);
    let i = 1;
    for (let s = 0; s < f(0); s++) i += 3 + 3 * f(i + 2);
    let calls = 0;
    let hasTidy = false;
    const textual: number[] = [];
    const C = CODE;
    while (i < fields.length) {
      const op = f(i);
      opCount.set(op, (opCount.get(op) ?? 0) + 1);
      if (op === C.decide) {
        const count = f(i + 5);
        calls += count;
        for (let c = 0; c < count; c++) textual.push(i + 7 + 2 * c);
        i += 6 + 2 * count;
      } else if (op === C.decideKeys) {
        const n = f(i + 1);
        calls += 1;
        textual.push(i + 2 + 2 * n + 2);
        i += 2 + 2 * n + 3;
      } else if (op === C.complete) {
        for (let c = 0; c < 2 * f(i + 2); c++) textual.push(i + 3 + c);
        i += 3 + 2 * f(i + 2);
      } else if (op === C.leave || op === C.paused) i += 2;
      else if (op === C.check || op === C.checkFull) {
        textual.push(i + 2, i + 3);
        i += 5;
      } else if (op === C.witness) {
        textual.push(i + 2, i + 3);
        i += 6;
      } else if (op === C.tidy) {
        hasTidy = true;
        i += 3;
      } else throw new Error(`unknown op ${op}`);
    }
    if (!(hasTidy && skipTidy)) batches.push({ keys, argv, fields, textual, calls, at: o.t });
  }
  const sizes = batches.map((b) => b.calls).sort((x, y) => x - y);
  const total = sizes.reduce((s, x) => s + x, 0);
  const stats = [
    `commands: ${[...names].map(([k, v]) => `${k} ${v}`).join(', ')}`,
    `batches ${batches.length}, decided calls ${total}, per batch median ${sizes[sizes.length >> 1]}, mean ${(total / batches.length).toFixed(1)}, max ${sizes.at(-1)}`,
    `ops: ${[...opCount].map(([k, v]) => `${Object.entries(CODE).find(([, c]) => c === k)?.[0]} ${v}`).join(', ')}`,
  ].join('\n');
  return { replid: head!.replid, wall: head!.wall, batches, stats };
}

const CODE = (() => {
  const lua = scripts.batch.lua;
  const get = (name: string): number => Number(new RegExp(`local ${name} = (-?\\d+)`).exec(lua)![1]);
  return {
    decide: get('VT_OP_DECIDE'),
    decideKeys: get('VT_OP_DECIDE_KEYS'),
    complete: get('VT_OP_COMPLETE'),
    leave: get('VT_OP_LEAVE'),
    check: get('VT_OP_CHECK'),
    checkFull: get('VT_OP_CHECK_FULL'),
    witness: get('VT_OP_WITNESS'),
    tidy: get('VT_OP_TIDY'),
    paused: get('VT_OP_PAUSED'),
  };
})();

async function stats(redis: Redis): Promise<{ cpu: number; usec: number; calls: number; byCommand: Map<string, number> }> {
  const text = (await redis.call('INFO', 'commandstats', 'cpu')) as string;
  const byCommand = new Map<string, number>();
  for (const match of text.matchAll(/^cmdstat_(\S+?):calls=(\d+)/gm)) byCommand.set(match[1]!, Number(match[2]));
  const cpu = (name: string): number => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(text)?.[1] ?? 0);
  const m = /^cmdstat_evalsha:calls=(\d+),usec=(\d+)/m.exec(text);
  return { cpu: cpu('used_cpu_user') + cpu('used_cpu_sys'), usec: Number(m?.[2] ?? 0), calls: Number(m?.[1] ?? 0), byCommand };
}

async function replay(): Promise<void> {
  const file = flag('in', '/tmp/vt-cost.capture');
  const rounds = Number(flag('rounds', '3'));
  const dirs = positional.slice(1);
  if (dirs.length === 0) throw new Error('name at least one lua directory');
  const capture = await loadCapture(file);
  process.stderr.write(`${capture.stats}\n`);
  // Batches of the first --skip-ms (the warm-up, 1000 ms in compare.ts) are replayed unmeasured, rounded to a chunk.
  const skipMs = Number(flag('skip-ms', '1000'));
  const startAt = capture.batches.find((b) => b.calls > 0)!.at;
  let warmBatches = capture.batches.findIndex((b) => b.at >= startAt + skipMs);
  if (warmBatches < 0) warmBatches = 0;
  const totalCalls = capture.batches.slice(warmBatches).reduce((s, b) => s + b.calls, 0);
  const server = await startRedis();
  const redis = new Redis({ host: '127.0.0.1', port: server.port });
  // DIR#text: members' numbers, scores and times as text (script version 25 on); DIR#numbers: as numbers (before).
  const variants = dirs.map((spec) => {
    const [dir, options = ''] = spec.split('#') as [string, string | undefined];
    const form = options.includes('text') ? 'text' : options.includes('numbers') ? 'numbers' : 'as captured';
    return { dir: spec, lua: assemble(dir), form, logsOnly: options.includes('logs'), cpu: [] as number[], usec: [] as number[], digest: '' };
  });
  try {
    const replid = /master_replid:(\w+)/.exec(await redis.info('replication'))![1]!;
    for (const v of variants) await redis.script('LOAD', v.lua);
    for (let round = 0; round < rounds; round++) {
      for (const v of variants) {
        const sha = createHash('sha1').update(v.lua).digest('hex');
        await redis.flushall();
        await redis.config('RESETSTAT');
        // The epoch and the mark as the batches knew them; times moved to now.
        const shift = Date.now() - (capture.wall + capture.batches[0]!.at);
        const first = capture.batches[0]!;
        const epochs = new Set<string>();
        for (const b of capture.batches) {
          if (b.argv[0]!.length) epochs.add(b.argv[0]!.toString());
        }
        const epochValue = (value: string): string => value.replace(capture.replid, replid);
        const epochKeyOf = (b: Batch): Buffer => {
          let last = b.keys.length;
          if (b.argv[7] !== undefined) last--;
          if (b.argv[5]!.toString() === '1') last -= 2;
          return b.keys[last - 1]!;
        };
        for (const b of capture.batches) {
          if (b.argv[0]!.length) {
            await redis.set(epochKeyOf(b), epochValue(b.argv[0]!.toString()));
            break;
          }
        }
        if (epochs.size > 1) process.stderr.write(`note: ${epochs.size} epochs in the capture\n`);
        const markIndex = first.argv[7] !== undefined ? first.keys.length - 2 : first.keys.length - 1;
        if (first.argv[5]!.toString() === '1') await redis.hset(first.keys[markIndex]!, 'm', 0, 'b', 0);
        let before = await stats(redis);
        const replies = createHash('sha1');
        const t0 = performance.now();
        const chunk = 64;
        for (let at = 0; at < capture.batches.length; at = at < warmBatches ? Math.min(at + chunk, warmBatches) : at + chunk) {
          // The warm-up's batches (every key's first booking) run before the reading, as in compare.ts.
          if (at === warmBatches) before = await stats(redis);
          const pipe = redis.pipeline();
          for (const b of capture.batches.slice(at, Math.min(at + chunk, at < warmBatches ? warmBatches : Infinity))) {
            // Times moved; a member's number, a score or a time as the variant's protocol wants it.
            const moved = b.fields.map((x) => {
              const value = Number(x);
              return value > 1e12 ? (typeof x === 'string' ? String(value + Math.round(shift)) : value + shift) : x;
            });
            if (v.form !== 'as captured') {
              for (const at of b.textual) {
                const value = Number(moved[at]);
                moved[at] = v.form === 'text' && value >= 0 && Number.isSafeInteger(value) ? String(value) : value;
              }
            }
            const argv = [...b.argv];
            let keys = b.keys;
            if (v.logsOnly) {
              // An experiment: each user key sends its log alone (the script derives meta).
              const extra = (b.argv[0]!.length ? 1 : 0) + (b.argv[5]!.toString() === '1' ? 2 : 0) + (b.argv[7] !== undefined ? 1 : 0);
              const users = (b.keys.length - extra) / 2;
              keys = [...b.keys.slice(0, 2 * users).filter((_k, index) => index % 2 === 0), ...b.keys.slice(2 * users)];
            }
            argv[0] = Buffer.from(argv[0]!.length ? epochValue(argv[0]!.toString()) : '');
            argv[4] = packAll(moved);
            pipe.evalsha(sha, keys.length, ...keys, ...argv);
          }
          const res = await pipe.exec();
          for (const [err, reply] of res ?? []) {
            if (err) throw err;
            // The replies, times left out, hashed: every variant must answer the same.
            replies.update(JSON.stringify(reply, (_k, x: unknown) => (typeof x === 'number' && x > 1e12 ? 'T' : x)));
            if (Array.isArray(reply) && reply.length === 1) throw new Error(`batch answered ${JSON.stringify(reply)}: the epoch was not in place`);
          }
        }
        const after = await stats(redis);
        // The logs' sizes at the end: what each ZADD searched.
        const lastKeys = capture.batches
          .at(-1)!
          .keys.filter((key) => key.toString().endsWith(':log'))
          .slice(0, 100);
        const sizes = await Promise.all(lastKeys.map((key) => redis.zcard(key)));
        const meanSize = sizes.reduce((x, y) => x + y, 0) / Math.max(1, sizes.length);
        const cpu = ((after.cpu - before.cpu) * 1e6) / totalCalls;
        const usec = (after.usec - before.usec) / totalCalls;
        if (round === 0) {
          const per = [...after.byCommand]
            .map(([name, n]) => [name, (n - (before.byCommand.get(name) ?? 0)) / totalCalls] as const)
            .filter(([name, x]) => x > 0.001 && name !== 'info' && name !== 'evalsha')
            .map(([name, x]) => `${name} ${x.toFixed(3)}`);
          process.stderr.write(`  commands per call inside: ${per.join(', ')}\n`);
        }
        const digest = replies.digest('hex').slice(0, 12);
        if (round === 0) v.digest = digest;
        v.cpu.push(cpu);
        v.usec.push(usec);
        process.stderr.write(
          `round ${round + 1} ${v.dir}: ${cpu.toFixed(2)} µs CPU/call, ${usec.toFixed(2)} µs in EVALSHA/call, replies ${digest} (${((performance.now() - t0) / 1000).toFixed(1)} s), logs of ${meanSize.toFixed(1)} slots at the end\n`,
        );
      }
    }
    const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
    const base = variants[0]!;
    console.log(`| variant | Redis CPU µs/call (median of ${rounds}) | in EVALSHA µs/call | ÷ first | replies (times left out) |`);
    console.log('| --- | ---: | ---: | ---: | --- |');
    for (const v of variants) {
      console.log(
        `| ${v.dir} | ${median(v.cpu).toFixed(2)} | ${median(v.usec).toFixed(2)} | ${(median(v.cpu) / median(base.cpu)).toFixed(3)} | ${v.digest === base.digest ? 'as the first' : `DIFFER (${v.digest})`} |`,
      );
    }
    console.log(
      `${totalCalls} decided calls measured per round (${capture.batches.length - warmBatches} batches, after ${warmBatches} of the first ${skipMs} ms)`,
    );
  } finally {
    redis.disconnect();
    await server.stop();
  }
}

const mode = positional[0];
(mode === 'capture' ? capture() : mode === 'replay' ? replay() : Promise.reject(new Error('capture or replay'))).catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
