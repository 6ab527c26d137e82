/**
 * The runnable examples under scripts/examples/, run as a user would (through tsx) against the
 * run's Redis: each exits by itself and does what it says.
 */
import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { mostInWindow } from './support/http-vendor.js';
import { redisServer } from './support/hooks.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Runs scripts/examples/`file` through tsx against the run's Redis, with `env` added; its output's lines. */
async function runExample(file: string, env: Record<string, string>): Promise<string[]> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', `scripts/examples/${file}`], {
    cwd: ROOT,
    env: { ...process.env, REDIS_URL: redisServer().url, ...env },
    timeout: 25_000,
  });
  return stdout.trim().split('\n');
}

describe('examples', function () {
  this.timeout(30_000);

  it('node-redis: two workers on node-redis clients keep 5 calls per second per user between them', async () => {
    const lines = await runExample('node-redis.ts', { EXAMPLE_CALLS: '6' });
    expect(lines.map((line) => line.split(':')[0])).to.deep.equal(['alice', 'bob']);
    for (const line of lines) {
      const starts = [...line.matchAll(/(\d+) ms \(worker (\d)\)/g)];
      expect(starts, line).to.have.length(12);
      expect(new Set(starts.map((start) => start[2])), 'both workers ran calls').to.have.property('size', 2);
      // Starts read on this process's clock, rounded to the ms: a window of 995 ms leaves room for both.
      expect(
        mostInWindow(
          starts.map((start) => Number(start[1])),
          995,
        ),
        line,
      ).to.equal(5);
    }
  });

  it("bullmq: light users run at once while the heavy user's jobs are delayed to 5 a second", async () => {
    const lines = await runExample('bullmq.ts', { EXAMPLE_HEAVY_JOBS: '12' });
    expect(lines.at(-1)).to.match(/^18 jobs completed, \d+ delays$/);
    expect(Number(/(\d+) delays/.exec(lines.at(-1)!)![1])).to.be.at.least(7);
    const times = new Map(lines.slice(0, -1).map((line) => [line.split(':')[0]!, [...line.matchAll(/\d+(?=,| ms)/g)].map(Number)]));
    expect([...times.keys()]).to.deep.equal(['heavy', 'ann', 'ben', 'cal']);
    expect(times.get('heavy')).to.have.length(12);
    expect(mostInWindow(times.get('heavy')!, 995)).to.equal(5);
    // Every light job ran before the heavy user's second window.
    const secondWindow = [...times.get('heavy')!].sort((a, b) => a - b)[5]!;
    for (const user of ['ann', 'ben', 'cal']) for (const at of times.get(user)!) expect(at).to.be.below(secondWindow);
  });

  it('functions: webhooks reserve and return, each call starts at its reserved time, 2 a second, and a token delivered twice makes one call', async () => {
    const lines = await runExample('functions.ts', { EXAMPLE_WEBHOOKS: '6' });
    expect(lines.at(-1)).to.equal('bob: a token delivered twice: refused: used');
    const calls = lines.slice(0, -1).map((line) => /^alice: reserved for (\d+) ms, started (\d+) ms$/.exec(line));
    expect(calls.every((match) => match !== null)).to.equal(true);
    expect(calls).to.have.length(6);
    const starts = calls.map((match) => Number(match![2]));
    for (const match of calls) expect(Number(match![2]) - Number(match![1]), match![0]).to.be.within(-2, 1_000);
    expect(mostInWindow(starts, 995)).to.equal(2);
  });

  it('opentelemetry: prints three spans of the throttle, each the parent of its HTTP span, the third held by 2/s, then the metrics', async () => {
    const output = (await runExample('opentelemetry.ts', {})).join('\n');
    const spans = output.split(/\n(?=\{)/).filter((block) => block.includes("name: 'schedule acme'"));
    expect(spans).to.have.length(3);
    expect(spans[2]).to.include("'vendor_throttle.reason': '2/s'");
    const ids = spans.map((block) => /\n {2}id: '([0-9a-f]+)'/.exec(block)?.[1]);
    const http = output.split(/\n(?=\{)/).filter((block) => block.includes("name: 'GET'"));
    expect(http.map((block) => /parentSpanContext: \{[^}]*spanId: '([0-9a-f]+)'/.exec(block)?.[1])).to.deep.equal(ids);
    expect(output).to.include("name: 'vendor_throttle.calls'");
  });
});
