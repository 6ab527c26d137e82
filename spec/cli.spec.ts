/**
 * The `vendor-throttle` command, run as a child process (`node --import tsx lib/cli/main.ts …`)
 * against a local HTTP vendor (spec/support/http-vendor.ts, which records every arrival) and the
 * test run's Redis. Windows are a few hundred ms, so each run takes a second or two.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { INSPECT_FLAGS, parseRunArgs, RUN_FLAGS } from '../lib/cli/args.js';
import { CliError } from '../lib/cli/errors.js';
import { ThrottleConfigError } from '../lib/errors.js';
import { loadRequests } from '../lib/cli/input.js';
import { compileKey } from '../lib/cli/key-template.js';
import { redisServer, uniquePrefix } from './support/hooks.js';
import { mostInWindow, startHttpVendor, type Arrival, type Respond, type Vendor } from './support/http-vendor.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MAIN = join(ROOT, 'lib/cli/main.ts');

interface Exit {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Starts the command; `done` resolves when it exits (killed after 20 s). With `stdin`, that text is
 * piped into the command's standard input (then closed); without, standard input is /dev/null.
 */
function start(args: readonly string[], stdin?: string): { child: ChildProcess; done: Promise<Exit> } {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], { cwd: ROOT, stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
  if (stdin !== undefined) {
    // A command that exits before reading it all (bad flags) closes the pipe: not this spec's error.
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(stdin);
  }
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const done = new Promise<Exit>((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
  return { child, done };
}

const cli = (...args: string[]): Promise<Exit> => start(args).done;

/** Runs the command with `input` piped into its standard input. */
const piped = (input: string, ...args: string[]): Promise<Exit> => start(args, input).done;

interface Row {
  readonly id: string;
  readonly user: string;
}

/** `count` requests per user, ids `<tag>-<n>`, users interleaved as a batch file would have them. */
function rows(users: readonly string[], count: number, tag = 'r'): Row[] {
  const list: Row[] = [];
  for (let n = 0; n < count; n++) for (const user of users) list.push({ id: `${tag}-${list.length}`, user });
  return list;
}

const urlOf = (vendor: Vendor, row: Row): string => `${vendor.url}/items?user=${row.user}&id=${row.id}`;

function ndjson(vendor: Vendor, list: readonly Row[]): string {
  return list.map((row) => JSON.stringify({ id: row.id, url: urlOf(vendor, row), key: row.user })).join('\n') + '\n';
}

function readResults(file: string): Array<Record<string, unknown>> {
  return parseResults(readFileSync(file, 'utf8'));
}

function parseResults(text: string): Array<Record<string, unknown>> {
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** The last line of each id: its outcome (a request refused by --max-delay-ms and resumed has two). */
function lastOfEach(results: ReadonlyArray<Record<string, unknown>>): Map<unknown, Record<string, unknown>> {
  return new Map(results.map((result) => [result.id, result]));
}

const idOf = (arrival: Arrival): string | null => new URL(arrival.path, 'http://vendor.invalid').searchParams.get('id');

/** Per user, the most arrivals in any window of `windowMs`. */
function worstWindow(vendor: Vendor, windowMs: number): number {
  const users = new Set(vendor.arrivals.map((arrival) => arrival.user!));
  return Math.max(...[...users].map((user) => mostInWindow(vendor.times(user, 0), windowMs)));
}

function count<T>(items: readonly T[]): Map<T, number> {
  const counts = new Map<T, number>();
  for (const item of items) counts.set(item, (counts.get(item) ?? 0) + 1);
  return counts;
}

describe('vendor-throttle command line', function () {
  this.timeout(30_000);
  let dir: string;
  let vendor: Vendor | undefined;
  const useVendor = async (respond?: Respond): Promise<Vendor> => (vendor = await startHttpVendor(respond));

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'vt-cli-'));
  });
  afterEach(async () => {
    await vendor?.close();
    vendor = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  it('sends every request, retries a 503, a 429 and a 403 with Retry-After through the throttle, keeps the rule at the vendor and writes every id once', async () => {
    const seen = new Set<string>();
    const server = await useVendor((arrival) => {
      const id = idOf(arrival)!;
      const first = !seen.has(id);
      seen.add(id);
      if (first && id === 'r-4') return { status: 503, body: { error: 'busy' } };
      if (first && id === 'r-7') return { status: 429, headers: { 'retry-after': '0' }, body: { error: 'slow down' } };
      // GitHub's way of saying "rate limited": a 403 with Retry-After.
      if (first && id === 'r-10') return { status: 403, headers: { 'retry-after': '0' }, body: { error: 'secondary rate limit' } };
      return { status: 200, body: { id } };
    });
    const list = rows(['ann', 'bob', 'cy'], 8);
    writeFileSync(join(dir, 'requests.ndjson'), ndjson(server, list));
    const out = join(dir, 'results.ndjson');

    const { code, stderr } = await cli('run', '--rule', '4/400ms', '--fallback-pause-ms', '50', '--out', out, join(dir, 'requests.ndjson'));
    expect(code, stderr).to.equal(0);
    const results = readResults(out);
    expect(results.map((result) => result.id).sort()).to.deep.equal(list.map((row) => row.id).sort());
    expect(results.every((result) => result.status === 200)).to.equal(true);
    const byId = new Map(results.map((result) => [result.id, result]));
    expect(byId.get('r-4')).to.include({ attempts: 2 });
    expect(byId.get('r-7')).to.include({ attempts: 2 });
    expect(byId.get('r-10')).to.include({ attempts: 2 });
    expect(byId.get('r-0')).to.include({ key: 'ann', attempts: 1 });
    expect(byId.get('r-0')!.body).to.deep.equal({ id: 'r-0' });
    expect(Date.parse(byId.get('r-0')!.startedAt as string)).to.be.closeTo(Date.now(), 30_000);
    // Every arrival counts, retries included.
    expect(server.arrivals).to.have.length(list.length + 3);
    expect(worstWindow(server, 400)).to.be.at.most(4);
    expect(stderr).to.match(/24 sent in .*24 ok, 0 failed/);
  });

  it('reads CSV with a key template, shares the limits through Redis, and inspect shows the usage', async () => {
    const server = await useVendor();
    const prefix = uniquePrefix();
    const list = rows(['c1', 'c2'], 6);
    const csv = [
      'id,method,url,headers,customer',
      ...list.map((row) => `${row.id},GET,/items?user=${row.user}&id=${row.id},"{""accept"":""application/json""}",${row.user}`),
    ];
    writeFileSync(join(dir, 'requests.csv'), csv.join('\n') + '\n');
    const out = join(dir, 'results.ndjson');
    const redis = ['--redis', redisServer().url, '--prefix', prefix, '--name', 'acme'];

    // 100/min as well: the keys keep a minute of history after the run (its longest window), for inspect.
    const run = await cli(
      'run',
      '--rule',
      '3/300ms',
      '--rule',
      '100/min',
      '--key',
      '{customer}',
      '--base-url',
      server.url,
      ...redis,
      '--no-body',
      '-q',
      '--out',
      out,
      join(dir, 'requests.csv'),
    );
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stderr).to.equal('');
    const results = readResults(out);
    expect(results.map((result) => result.id).sort()).to.deep.equal(list.map((row) => row.id).sort());
    expect(results.every((result) => result.body === undefined && result.status === 200)).to.equal(true);
    expect(server.arrivals.every((arrival) => arrival.headers.accept === 'application/json')).to.equal(true);
    expect(worstWindow(server, 300)).to.be.at.most(3);

    const [one, json, busiest] = await Promise.all([
      cli('inspect', ...redis, '--rule', '3/300ms', '--rule', '100/min', 'c1'),
      cli('inspect', ...redis, '--rule', '100/min', '--json', 'c2'),
      cli('inspect', ...redis, '--rule', '100/min', '--top', '5'),
    ]);
    expect(one.code, one.stderr).to.equal(0);
    expect(one.stdout)
      .to.include('"c1"')
      .and.to.match(/100\/min\s+6\/100/)
      .and.to.include('next free slot');
    const report = JSON.parse(json.stdout) as { key: string; rules: Array<{ limit: number; used: number }>; pausedForMs: number };
    expect(report.key).to.equal('c2');
    expect(report.rules[0]).to.include({ limit: 100, used: 6 });
    expect(report.pausedForMs).to.equal(0);
    expect(busiest.code, busiest.stderr).to.equal(0);
    expect(busiest.stdout)
      .to.match(/^c1\s+6\/100/m)
      .and.to.match(/^c2\s+6\/100/m)
      .and.to.include('of 2 keys');
    expect(one.stdout)
      .to.match(/100\/min\s+6\/100\s+94\s/)
      .and.to.include('booked to start later (all processes): 0');
    expect(one.stdout).not.to.include('nothing stored');
    expect(report).to.include({ bookedAhead: 0, stored: true });

    // A key or a namespace with nothing in it says so (a forgotten --name reads as an empty key).
    const wrongName = ['--redis', redisServer().url, '--prefix', prefix, '--name', 'acmee'];
    const [nobody, none] = await Promise.all([cli('inspect', ...wrongName, '--rule', '100/min', 'c1'), cli('inspect', ...wrongName, '--rule', '100/min')]);
    expect(nobody.stdout).to.include('nothing stored for this key').and.to.include('another --name');
    expect(none.stdout).to.include('no keys with a log in').and.to.include('another --name');
  });

  it('learns the limit a vendor publishes below --rule, paces every request by it, and inspect shows it', async () => {
    const server = await useVendor(() => ({ status: 200, headers: { 'ratelimit-policy': '"default";q=2;w=1' } }));
    const prefix = uniquePrefix();
    writeFileSync(join(dir, 'requests.ndjson'), ndjson(server, rows(['c1'], 9)));
    const redis = ['--redis', redisServer().url, '--prefix', prefix, '--name', 'acme'];
    const run = await cli('run', '--rule', '5/s', ...redis, '-q', '--out', join(dir, 'results.ndjson'), join(dir, 'requests.ndjson'));
    expect(run.code, run.stderr).to.equal(0);
    // The first burst went at 5/s before any answer; the rest at the vendor's 2/s.
    expect(server.arrivals).to.have.length(9);
    expect(mostInWindow(server.times('c1', 0).slice(5), 1_000)).to.be.at.most(2);
    const [text, json] = await Promise.all([cli('inspect', ...redis, '--rule', '5/s', 'c1'), cli('inspect', ...redis, '--rule', '5/s', '--json', 'c1')]);
    expect(text.stdout).to.match(/learned from the vendor: 2\/s \(RateLimit-Policy\), lapses in/);
    expect(text.stdout).to.match(/2\/s\s+\d\/2/);
    const report = JSON.parse(json.stdout) as { learned: Array<{ limit: number; windowMs: number; source: string }> };
    expect(report.learned).to.have.length(1);
    expect(report.learned[0]).to.include({ limit: 2, windowMs: 1_000, source: 'policy' });
  });

  it('--key twice with --rule KEY=RULE: every request counts under its user and an app-wide key, and inspect reads each', async () => {
    const server = await useVendor();
    const prefix = uniquePrefix();
    const list = rows(['c1', 'c2', 'c3'], 4);
    writeFileSync(join(dir, 'requests.ndjson'), ndjson(server, list));
    const redis = ['--redis', redisServer().url, '--prefix', prefix, '--name', 'acme'];
    const run = await cli(
      'run',
      '--key',
      '{key}',
      '--key',
      'app',
      '--rule',
      '2/300ms',
      '--rule',
      '100/min',
      '--rule',
      'app=4/300ms',
      '--rule',
      'app=200/min',
      ...redis,
      '-q',
      '--no-body',
      '--out',
      join(dir, 'results.ndjson'),
      join(dir, 'requests.ndjson'),
    );
    expect(run.code, run.stderr).to.equal(0);
    expect(readResults(join(dir, 'results.ndjson'))).to.have.length(12);
    expect(worstWindow(server, 300)).to.be.at.most(2);
    expect(
      mostInWindow(
        server.arrivals.map((arrival) => arrival.at).sort((a, b) => a - b),
        300,
      ),
      'app-wide',
    ).to.equal(4);
    const busiest = await cli('inspect', ...redis, '--rule', '100/min', '--rule', 'app=200/min');
    expect(busiest.code, busiest.stderr).to.equal(0);
    expect(busiest.stdout)
      .to.match(/^app\s+200\/min 12\/200/m)
      .and.to.match(/^c1\s+100\/min 4\/100/m);
    const bad = await cli('run', '--key', '{user}', '--key', 'app', '--rule', 'app=4/300ms', join(dir, 'requests.ndjson'));
    expect(bad.code).to.equal(2);
    expect(bad.stderr).to.include('at least one --rule is required, for every key');
  });

  it('stops cleanly on SIGINT, and --resume sends the rest: nothing twice, nothing lost, the rule kept across both runs', async () => {
    const server = await useVendor();
    const list = rows(['ann', 'bob', 'cy'], 6);
    const input = join(dir, 'requests.ndjson');
    writeFileSync(input, ndjson(server, list));
    const out = join(dir, 'results.ndjson');
    // No --redis: the resumed run learns the calls still counting from the results file. The window
    // outlasts the restart, so the resumed run would overrun it without them.
    const args = ['run', '--rule', '3/1500ms', '--out', out, input];

    const first = start(args);
    const deadline = Date.now() + 15_000;
    while (!(existsSync(out) && readResults(out).length >= 6) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    first.child.kill('SIGINT');
    const stopped = await first.done;
    expect(stopped.code, stopped.stderr).to.equal(130);
    expect(stopped.stderr).to.include('--resume');
    const before = readResults(out).length;
    expect(before).to.be.within(6, list.length - 1);
    // Whatever reached the vendor before the stop is in the results file.
    expect(server.arrivals).to.have.length(before);

    const resumed = await cli(...args, '--resume');
    expect(resumed.code, resumed.stderr).to.equal(0);
    expect(resumed.stderr).to.include(`${before} done earlier`);
    const ids = readResults(out).map((result) => result.id as string);
    expect(ids.sort()).to.deep.equal(list.map((row) => row.id).sort());
    const sent = count(server.arrivals.map(idOf));
    expect([...sent.values()].every((n) => n === 1)).to.equal(true);
    expect(sent.size).to.equal(list.length);
    expect(worstWindow(server, 1500)).to.be.at.most(3);
  });

  it('--workers 2 --redis: two runs of two workers each keep every key under the rule', async () => {
    const server = await useVendor();
    const users = ['ann', 'bob', 'cy', 'dee'];
    const a = rows(users, 5, 'a');
    const b = rows(users, 5, 'b');
    writeFileSync(join(dir, 'a.ndjson'), ndjson(server, a));
    writeFileSync(join(dir, 'b.ndjson'), ndjson(server, b));
    const shared = ['--rule', '4/400ms', '--workers', '2', '--redis', redisServer().url, '--prefix', uniquePrefix(), '--name', 'acme', '-q'];

    const [runA, runB] = await Promise.all([
      cli('run', ...shared, '--out', join(dir, 'a.out'), join(dir, 'a.ndjson')),
      cli('run', ...shared, '--out', join(dir, 'b.out'), join(dir, 'b.ndjson')),
    ]);
    expect(runA.code, runA.stderr).to.equal(0);
    expect(runB.code, runB.stderr).to.equal(0);
    expect(
      readResults(join(dir, 'a.out'))
        .map((result) => result.id)
        .sort(),
    ).to.deep.equal(a.map((row) => row.id).sort());
    expect(
      readResults(join(dir, 'b.out'))
        .map((result) => result.id)
        .sort(),
    ).to.deep.equal(b.map((row) => row.id).sort());
    expect(server.arrivals).to.have.length(a.length + b.length);
    expect(worstWindow(server, 400)).to.be.at.most(4);
  });

  it("reads requests from standard input ('-'), hands them to --workers, and writes results to standard output", async () => {
    const server = await useVendor();
    const list = rows(['ann', 'bob', 'cy', 'dee'], 3);

    const { code, stdout, stderr } = await piped(ndjson(server, list), 'run', '--rule', '2/200ms', '--workers', '2', '-');
    expect(code, stderr).to.equal(0);
    const results = parseResults(stdout);
    expect(results.map((result) => result.id).sort()).to.deep.equal(list.map((row) => row.id).sort());
    expect(results.every((result) => result.status === 200 && result.attempts === 1)).to.equal(true);
    expect(server.arrivals).to.have.length(list.length);
    expect(worstWindow(server, 200)).to.be.at.most(2);
    expect(stderr)
      .to.include('2 workers')
      .and.to.match(/12 sent in .*12 ok, 0 failed/);
  });

  it('checks every line of standard input before sending anything: a bad one names stdin:LINE, exit 2, nothing sent', async () => {
    const server = await useVendor();
    const good = (id: string): string => JSON.stringify({ id, url: `${server.url}/?user=ann&id=${id}`, key: 'ann' });
    const out = join(dir, 'results.ndjson');
    const url = `${server.url}/?user=ann`;
    const cases: Array<[input: string, args: string[], message: RegExp]> = [
      [
        `${good('a')}\n{"url": "${url}" "key": 1}\n${good('b')}\n${JSON.stringify({ id: 'c', key: 'ann' })}\n`,
        [],
        /2 bad requests in stdin, nothing was sent:\nstdin:2: not valid JSON.*\nstdin:4: 'url' is missing/,
      ],
      [
        `id,url,key\n1,${url},ann\n2,${url},\n3,${url},ann\n4,${url}\n`,
        ['--format', 'csv'],
        /2 bad requests in stdin.*\nstdin:3: no key.*\nstdin:5: not valid CSV/,
      ],
      [`${good('a')}\n${good('a')}\n`, [], /stdin:2: duplicate id "a" \(first on line 1\)/],
      ['', [], /stdin: no requests found/],
    ];
    const exits = await Promise.all(cases.map(([input, args]) => piped(input, 'run', '--rule', '5/s', '--out', out, ...args, '-')));
    exits.forEach((exit, i) => {
      const [, args, message] = cases[i]!;
      expect(exit.code, `case ${i}: ${exit.stderr}`).to.equal(2);
      expect(exit.stderr, `case ${i} ${args.join(' ')}`).to.match(message);
      expect(exit.stderr).not.to.include('    at ');
    });
    expect(server.arrivals).to.have.length(0);
    expect(existsSync(out)).to.equal(false);
  });

  it("refuses '-' when standard input is a terminal instead of waiting for it", async () => {
    const terminal = Object.assign(Readable.from([]), { isTTY: true });
    let error: unknown;
    try {
      await loadRequests({ file: '-', format: 'ndjson', key: compileKey(undefined), baseUrl: undefined, headers: {}, stdin: terminal });
    } catch (caught) {
      error = caught;
    }
    expect(error).to.be.instanceOf(ThrottleConfigError);
    expect(error).to.include({ argument: '<file>' });
    expect((error as ThrottleConfigError).message).to.match(/standard input, which is a terminal.*pipe them in/);
    // The same stream as a pipe is read.
    const pipe = Readable.from([`${JSON.stringify({ url: 'http://127.0.0.1:1/x', key: 'a' })}\n`]);
    const requests = await loadRequests({ file: '-', format: 'ndjson', key: compileKey(undefined), baseUrl: undefined, headers: {}, stdin: pipe });
    expect(requests).to.have.length(1);
    expect(requests[0]).to.include({ id: 1, line: 1, key: 'a' });
  });

  it('stdin with --resume: a run stopped part way goes on when the same requests are piped in again, nothing twice', async () => {
    const server = await useVendor();
    const list = rows(['ann', 'bob', 'cy'], 4);
    const input = ndjson(server, list);
    const out = join(dir, 'results.ndjson');
    // The first two of each user go at once, the rest only once the 600 ms window allows: time to stop it.
    const args = ['run', '--rule', '2/600ms', '--out', out, '-'];

    const first = start(args, input);
    const deadline = Date.now() + 15_000;
    while (!(existsSync(out) && readResults(out).length >= 6) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    first.child.kill('SIGINT');
    const stopped = await first.done;
    expect(stopped.code, stopped.stderr).to.equal(130);
    expect(stopped.stderr).to.include('piping in the same requests, with --resume');
    const before = readResults(out).length;
    expect(before).to.be.within(6, list.length - 1);
    expect(server.arrivals).to.have.length(before);

    const resumed = await piped(input, ...args, '--resume');
    expect(resumed.code, resumed.stderr).to.equal(0);
    expect(resumed.stderr)
      .to.include(`${list.length - before} requests for`)
      .and.to.include(`${before} done earlier`);
    expect(
      readResults(out)
        .map((result) => result.id as string)
        .sort(),
    ).to.deep.equal(list.map((row) => row.id).sort());
    const sent = count(server.arrivals.map(idOf));
    expect(sent.size).to.equal(list.length);
    expect([...sent.values()].every((n) => n === 1)).to.equal(true);
    expect(worstWindow(server, 600)).to.be.at.most(2);
  });

  it('--max-delay-ms refuses what would wait too long (a retry after a 429 too), sends the rest, and --resume sends the refused', async () => {
    const seen = new Set<string>();
    const server = await useVendor((arrival) => {
      const id = idOf(arrival)!;
      const first = !seen.has(id);
      seen.add(id);
      // The vendor pauses carl for 5 s: far beyond --max-delay-ms, so the retry is not sent.
      if (first && arrival.user === 'carl') return { status: 429, headers: { 'retry-after': '5' }, body: { error: 'slow down' } };
      return { status: 200, body: { id } };
    });
    // ann: 2 now, 2 more once the 400 ms window has room (a wait of about 400 ms), the last 2 would
    // wait about 800 ms: refused under --max-delay-ms 600. bob's 2 go at once.
    const list = [...rows(['ann'], 6, 'a'), ...rows(['bob'], 2, 'b'), ...rows(['carl'], 1, 'c')];
    const input = join(dir, 'requests.ndjson');
    writeFileSync(input, ndjson(server, list));
    const out = join(dir, 'results.ndjson');
    const args = ['run', '--rule', '2/400ms', '--fallback-pause-ms', '50', '--out', out, input];

    const first = await cli(...args, '--max-delay-ms', '600');
    expect(first.code, first.stderr).to.equal(1);
    const results = readResults(out);
    expect(results).to.have.length(list.length);
    const refused = results.filter((result) => result.refused !== undefined);
    const neverSent = refused.filter((result) => result.attempts === 0);
    expect(neverSent.map((result) => result.key)).to.deep.equal(['ann', 'ann']);
    for (const result of neverSent) {
      expect(result).to.include({ status: null, startedAt: null, ms: null });
      expect(result.refused).to.match(/no slot within --max-delay-ms \(600 ms\): rule 2\/400ms is full/);
      expect(result.retryAfterMs).to.be.a('number').above(600);
    }
    const carl = results.find((result) => result.key === 'carl')!;
    expect(carl).to.include({ status: 429, attempts: 1 });
    expect(carl.refused).to.match(/the key is paused/);
    expect(carl.retryAfterMs).to.be.above(4_000);
    expect(refused).to.have.length(3);
    // Everything else was sent once, within the rule; nothing refused reached the vendor.
    const sentIds = count(server.arrivals.map(idOf));
    expect(server.arrivals).to.have.length(7);
    for (const result of neverSent) expect(sentIds.has(result.id as string)).to.equal(false);
    expect(results.filter((result) => result.refused === undefined).every((result) => result.status === 200)).to.equal(true);
    expect(worstWindow(server, 400)).to.be.at.most(2);
    expect(first.stderr).to.match(/6 sent in .*: 6 ok, 0 failed; 3 refused: no slot within --max-delay-ms \(--resume --out .* sends them again\)/);

    const resumed = await cli(...args, '--resume');
    expect(resumed.code, resumed.stderr).to.equal(0);
    expect(resumed.stderr).to.include('3 requests for 2 keys').and.to.include('6 done earlier, skipped; 3 refused earlier by --max-delay-ms, sent again');
    const outcomes = lastOfEach(readResults(out));
    expect([...outcomes.keys()].sort()).to.deep.equal(list.map((row) => row.id).sort());
    expect([...outcomes.values()].every((result) => result.status === 200 && result.refused === undefined)).to.equal(true);
    // The refused ones were sent now, once each; carl's twice in all (the 429, then this).
    expect(server.arrivals).to.have.length(10);
    const sent = count(server.arrivals.map(idOf));
    expect(list.filter((row) => row.user !== 'carl').every((row) => sent.get(row.id) === 1)).to.equal(true);
    expect(sent.get('c-0')).to.equal(2);
    expect(worstWindow(server, 400)).to.be.at.most(2);
  });

  it('refuses bad files and bad flags with a clear message and a non-zero exit, sending nothing', async () => {
    const server = await useVendor();
    const good = join(dir, 'good.ndjson');
    writeFileSync(good, ndjson(server, rows(['ann'], 2)));
    const malformed = join(dir, 'malformed.ndjson');
    writeFileSync(malformed, `${JSON.stringify({ url: `${server.url}/?user=ann`, key: 'ann' })}\n{"url": "${server.url}/" "key": 1}\n`);
    const existing = join(dir, 'existing.ndjson');
    writeFileSync(existing, '{"id":"x","status":200}\n');

    // Through the command, in parallel: each starts a process (about half a second).
    const cases: Array<[args: string[], message: RegExp]> = [
      [['run', '--rule', '5/s', join(dir, 'missing.ndjson')], /missing\.ndjson: no such file/],
      [['run', '--rule', '5/s', join(dir, 'missing.csv')], /missing\.csv: no such file/],
      [['run', '--rule', '5/s', '--max-delay-ms', 'soon', good], /--max-delay-ms: expected a number of ms such as 500, or a duration such as 30s or 2m/],
      [['run', '--rule', '5/s', '--max-delay', '30s', good], /Unknown option '--max-delay' \(did you mean '--max-delay-ms'\?\)/],
      [['run', '--rule', '5/s', malformed], /malformed\.ndjson:2: not valid JSON/],
      [['run', '--rule', '5/s', '--out', existing, good], /already holds results: pass --resume/],
      [['run', '--rule', '5/mn', '--bogus', good], /Unknown option '--bogus'/],
      [['frobnicate'], /unknown command 'frobnicate'/],
      [['inspct'], /unknown command 'inspct' \(did you mean 'inspect'\?\)/],
    ];
    const exits = await Promise.all(cases.map(([args]) => cli(...args)));
    exits.forEach((exit, i) => {
      const [args, message] = cases[i]!;
      expect(exit.code, `${args.join(' ')}: ${exit.stderr}`).to.equal(2);
      expect(exit.stderr, args.join(' ')).to.match(message);
      expect(exit.stderr, args.join(' ')).not.to.include('    at ');
    });
    expect(server.arrivals).to.have.length(0);
    expect(readFileSync(existing, 'utf8')).to.equal('{"id":"x","status":200}\n');
  });

  it('says which flag is wrong and why (the parser the command runs)', () => {
    // Every bad flag is a ThrottleConfigError, as a bad library option is, naming the flag in `argument`.
    const fails = (args: string[], message: RegExp, argument: string): void => {
      let error: unknown;
      try {
        parseRunArgs(args, () => undefined);
      } catch (caught) {
        error = caught;
      }
      expect(error, args.join(' ')).to.be.instanceOf(ThrottleConfigError);
      expect((error as ThrottleConfigError).message).to.match(message);
      expect(error, args.join(' ')).to.include({ argument, code: 'ERR_THROTTLE_CONFIG' });
    };
    fails(['--rule', '5/mn', 'f.ndjson'], /--rule '5\/mn': Expected a rule like/, '--rule');
    fails(['f.ndjson'], /at least one --rule is required/, '--rule');
    fails(['--rule', '5/s', '--workers', 'two', 'f.ndjson'], /--workers: expected a whole number/, '--workers');
    fails(['--rule', '5/s', '--resume', 'f.ndjson'], /--resume needs --out/, '--resume');
    fails(['--rule', '5/s', '--timeout-ms', 'soon', 'f.ndjson'], /--timeout-ms: expected a number of ms from 1/, '--timeout-ms');
    fails(['--rule', '5/s', '--mode', 'throw', 'f.ndjson'], /--mode: expected 'wait'/, '--mode');
    fails(['--rule', '5/s', '--redis', 'localhost:6379', 'f.ndjson'], /--redis: expected a URL/, '--redis');
    fails(['--rule', '5/s', '--name', 'a:b', 'f.ndjson'], /--name/, '--name');
    fails(['--rule', '5/s', 'a.ndjson', 'b.ndjson'], /expected one input file, got 2/, '<file>');
    fails(['--rule', '5/s'], /missing the input file .*'-' reads standard input/, '<file>');
    fails(['--rule', '5/s', '--max-delay-ms', 'a while', '-'], /--max-delay-ms: expected a number of ms/, '--max-delay-ms');
    fails(['--rule', '5/s', '--max-delay-ms=-1s', '-'], /--max-delay-ms: expected a number of ms/, '--max-delay-ms');
    fails(['--rule', '5/s', '--max-delay-ms', '2d', '-'], /--max-delay-ms: expected a number of ms/, '--max-delay-ms');
    fails(['--rule', '5/s', '--max-delay-ms', '25h', '-'], /--max-delay-ms: .*up to a day/, '--max-delay-ms');
    fails(['--rule', '5/s', '--fallback-pause-ms=-5', '-'], /--fallback-pause-ms: expected a number of ms/, '--fallback-pause-ms');
    fails(['--rule', '5/s', '--format', 'tsv', '-'], /--format: expected 'ndjson' or 'csv', got 'tsv'/, '--format');
    fails(['--rule', '5/s', '--rule', '=5/s', '-'], /--rule '=5\/s': expected a key before '='/, '--rule');
    fails(['--rule', '5/s', '--key', 'a', '--key', 'b', '--workers', '2', '-'], /need --redis/, '--key');
    fails(['--rule', '5/s', '--key', 'a', '--key', 'b', '--redis', 'redis://127.0.0.1:7000', '--cluster', '-'], /needs --hash-tag name/, '--key');
    fails(['--rule', '5/s', '--hash-tag', 'slot', '-'], /--hash-tag: expected 'key' or 'name'/, '--hash-tag');
    fails(['--rule', '5/s', '--hash-tag', 'name', '-'], /--hash-tag needs --redis/, '--hash-tag');
    fails(['--rule', '5/s', '--bogus', '-'], /Unknown option '--bogus'/, '--bogus');
    fails(['--rule', '5/s', '--rule'], /'-r, --rule <value>' argument missing/, '--rule');
    expect(
      parseRunArgs(['-r', '5/s', '-r', 'app=20/s', '-k', '{user}', '-k', 'app', '--redis', 'redis://127.0.0.1:7000', '--cluster', '--hash-tag', 'name', '-']),
    )
      .to.deep.include({ keys: ['{user}', 'app'] })
      .and.to.have.nested.property('throttle.hashTag', 'name');
    const stdin = parseRunArgs(['-r', '5/s', '--max-delay-ms', '2m', '-']);
    expect(stdin).to.deep.include({ file: '-', format: 'ndjson' });
    expect(stdin).to.have.nested.property('send.maxDelayMs', 120_000);
    expect(parseRunArgs(['-r', '5/s', '--format', 'csv', '--max-delay-ms', '1500', '-']))
      .to.deep.include({ format: 'csv' })
      .and.to.have.nested.property('send.maxDelayMs', 1500);
    expect(parseRunArgs(['-r', '5/s', '--max-delay-ms', '0', 'in.ndjson'])).to.have.nested.property('send.maxDelayMs', 0);
    expect(parseRunArgs(['-r', '5/s', 'in.ndjson'])).to.have.nested.property('send.maxDelayMs', undefined);
    const options = parseRunArgs(['-r', '30/min', '-r', '10000/day', '--timeout-ms', '2m', '-H', 'Authorization: Bearer x', 'in.CSV']);
    expect(options).to.deep.include({ format: 'csv', headers: { authorization: 'Bearer x' } });
    expect(options).to.have.nested.property('send.timeoutMs', 120_000);
    expect(options).to.have.nested.property('throttle.rules').that.deep.equals(['30/min', '10000/day']);
  });

  it('says which line of a file is wrong and why', async () => {
    const load = async (name: string, text: string, key?: string): Promise<string> => {
      writeFileSync(join(dir, name), text);
      try {
        await loadRequests({ file: join(dir, name), format: name.endsWith('.csv') ? 'csv' : 'ndjson', key: compileKey(key), baseUrl: undefined, headers: {} });
      } catch (error) {
        expect(error).to.be.instanceOf(CliError);
        return (error as CliError).message;
      }
      throw new Error(`${name} was accepted`);
    };
    const url = 'http://127.0.0.1:1/x';
    expect(await load('dup.csv', `id,url,key\n1,${url},a\n1,${url},b\n`)).to.match(/dup\.csv:3: duplicate id "1" \(first on line 2\)/);
    expect(await load('quote.csv', `id,url,key\n1,"${url},a\n`)).to.match(/quote\.csv:\d+: not valid CSV/);
    expect(await load('nokey.ndjson', `${JSON.stringify({ url })}\n`)).to.match(/nokey\.ndjson:1: no key/);
    expect(await load('field.ndjson', `\n${JSON.stringify({ url })}\n`, '{user_id}')).to.match(/field\.ndjson:2: no 'user_id' field/);
    expect(await load('array.ndjson', '[1]\n')).to.match(/array\.ndjson:1: expected a JSON object/);
    expect(await load('ftp.ndjson', `${JSON.stringify({ url: 'ftp://x/', key: 'a' })}\n`)).to.match(/'url' must be http or https/);
    expect(await load('get.ndjson', `${JSON.stringify({ url, key: 'a', method: 'GET', body: 'x' })}\n`)).to.match(/a GET request cannot have a body/);
    expect(await load('empty.ndjson', '\n')).to.match(/no requests found/);
    const many = Array.from({ length: 12 }, () => '{').join('\n');
    expect(await load('many.ndjson', many))
      .to.match(/12 bad requests/)
      .and.to.match(/… and 2 more/);
  });

  it('prints help and version; the help and docs/cli.md name every flag', async () => {
    const [help, runHelp, inspectHelp, version] = await Promise.all([cli('--help'), cli('run', '--help'), cli('inspect', '--help'), cli('--version')]);
    expect(help.code).to.equal(0);
    expect(help.stdout).to.include('vendor-throttle run').and.to.include('vendor-throttle inspect');
    expect(runHelp.code).to.equal(0);
    expect(inspectHelp.code).to.equal(0);
    const docs = readFileSync(join(ROOT, 'docs/cli.md'), 'utf8');
    for (const [flags, text] of [
      [RUN_FLAGS, runHelp.stdout],
      [INSPECT_FLAGS, inspectHelp.stdout],
    ] as const) {
      for (const name of Object.keys(flags)) {
        expect(text, `--help of ${name}`).to.include(`--${name}`);
        expect(docs, `docs/cli.md of ${name}`).to.include(`--${name}`);
      }
    }
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    expect(version.stdout.trim()).to.equal(pkg.version);
  });
});
