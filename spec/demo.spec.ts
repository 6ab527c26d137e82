import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { renderChart, windowSeries } from '../scripts/demo/chart.js';
import { redisServer } from './support/hooks.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `npm run demo` (its script, through tsx) with `args` and REDIS_URL set or not; resolves when it exits. */
function demo(args: readonly string[], redisUrl?: string): Promise<Run> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.REDIS_URL;
  for (const name of ['DEMO_USERS', 'DEMO_CALLS', 'DEMO_WORKERS', 'DEMO_OUT']) delete env[name];
  if (redisUrl !== undefined) env.REDIS_URL = redisUrl;
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/demo.ts', ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`demo still running after 60 s:\n${stdout}\n${stderr}`));
    }, 60_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `sent accepted dropped` of a row of the report. */
function reportRow(stdout: string, label: string): { sent: number; accepted: number; dropped: number } {
  const match = new RegExp(`^\\s+${label.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s`, 'm').exec(stdout);
  if (!match) throw new Error(`no '${label}' row in the report:\n${stdout}`);
  return { sent: Number(match[1]), accepted: Number(match[2]), dropped: Number(match[3]) };
}

/** Throws unless every element of `svg` is closed in order (a well-formed-looking document). */
function checkTags(svg: string): void {
  const open: string[] = [];
  for (const match of svg.matchAll(/<(\/?)([a-zA-Z][\w:-]*)[^>]*?(\/?)>/g)) {
    const [, closing, name, selfClosing] = match;
    if (selfClosing) continue;
    if (!closing) open.push(name!);
    else if (open.pop() !== name) throw new Error(`</${name}> closes <${open.at(-1) ?? 'nothing'}> at ${match.index}`);
  }
  if (open.length > 0) throw new Error(`unclosed: ${open.join(', ')}`);
}

/** Checks a chart file and the report that names it. */
function checkRun(run: Run, out: string, calls: number): void {
  expect(run.code, run.stderr).to.equal(0);
  const throttled = reportRow(run.stdout, 'throttled');
  expect(throttled).to.deep.equal({ sent: calls, accepted: calls, dropped: 0 });
  const naive = reportRow(run.stdout, 'naive Promise.all');
  expect(naive.sent).to.equal(calls);
  expect(naive.dropped).to.be.greaterThan(0);
  expect(naive.accepted + naive.dropped).to.equal(calls);
  expect(run.stdout).to.match(/quota utilization \d+%/);
  expect(run.stdout).to.include(`: ${out}`);

  expect(existsSync(out)).to.equal(true);
  const svg = readFileSync(out, 'utf8');
  expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).to.equal(true);
  expect(svg.trimEnd().endsWith('</svg>')).to.equal(true);
  checkTags(svg);
  expect(svg).to.include('vendor limit 10 per 1000 ms');
  expect(svg).to.include(`${calls} sent · ${calls} performed · 0 silently dropped`);
}

describe('npm run demo (scripts/demo.ts), as a child process', function () {
  this.timeout(90_000);
  let dir: string;

  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'vt-demo-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('without Redis (MemoryStore, one process): nothing dropped, a chart written', async () => {
    const out = path.join(dir, 'memory', 'chart.svg');
    const run = await demo(['--users', '3', '--calls', '20', '--out', out]);
    checkRun(run, out, 60);
    expect(run.stdout).to.include('MemoryStore, one process');
    // Not a terminal: plain progress lines on stderr.
    expect(run.stderr).to.match(/throttled: 60\/60 calls sent/);
  });

  it('with REDIS_URL (RedisStore, worker processes): nothing dropped, a chart written', async () => {
    const out = path.join(dir, 'redis.svg');
    const run = await demo(['--users', '2', '--calls', '20', '--workers', '2', '--out', out], redisServer().url);
    checkRun(run, out, 40);
    expect(run.stdout).to.include('RedisStore at redis://');
    expect(run.stdout).to.include('2 worker processes');
  });

  it('says what is wrong with a bad flag and exits with 2', async () => {
    const run = await demo(['--calls', 'many']);
    expect(run.code).to.equal(2);
    expect(run.stderr).to.include("Expected --calls to be a whole number from 1 to 10000, got 'many'");
  });
});

describe('demo chart (scripts/demo/chart.ts)', () => {
  it('counts the busiest user in the window (t − windowMs, t] at every moment', () => {
    const arrivals = new Map([
      ['a', [1_000, 1_100, 1_999, 2_000]],
      ['b', [1_050]],
    ]);
    // Times relative to the first arrival (1000). a's first call leaves at 1000 ms, as its 4th arrives.
    expect(windowSeries(arrivals, 1_000)).to.deep.equal([
      { t: 0, count: 0 },
      { t: 0, count: 1 },
      { t: 100, count: 2 },
      { t: 999, count: 3 },
      { t: 1_100, count: 2 },
      { t: 1_999, count: 1 },
      { t: 2_000, count: 0 },
    ]);
    expect(windowSeries(new Map(), 1_000)).to.deep.equal([{ t: 0, count: 0 }]);
  });

  it('draws one panel per run, escapes text, and marks what went over the limit', () => {
    const svg = renderChart({
      title: 'limit <10> & co',
      footnote: 'note',
      limit: 2,
      windowMs: 100,
      panels: [
        { title: 'a', subtitle: 'x', arrivals: new Map([['u', [0, 10]]]), color: '#00f' },
        { title: 'b', subtitle: 'y', arrivals: new Map([['u', [0, 1, 2, 3]]]), color: '#f80' },
      ],
    });
    checkTags(svg);
    expect(svg).to.include('limit &lt;10&gt; &amp; co');
    expect(svg.match(/clip-path="url\(#over-limit-\d\)"/g)).to.have.length(2);
    expect(svg.match(/stroke="#00f"|stroke="#f80"/g)).to.have.length(2);
  });
});
