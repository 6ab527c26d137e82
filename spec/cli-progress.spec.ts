/**
 * The CLI's progress (lib/cli/progress.ts) on a fake clock: its ETA comes from the rules of each
 * key and the requests each key has left, not from the rate observed so far, which the opening
 * burst (a whole window of quota at once) makes far too high.
 */
import { expect } from 'chai';
import { Progress, rulesOfRun, type PlannedRequest, type ProgressPlan } from '../lib/cli/progress.js';
import { useFakeClock } from './support/fake-clock.js';

/** A stderr that is not a terminal: Progress writes one plain line per `step` percent to it. */
function fakeStderr(): { stream: NodeJS.WriteStream; lines: string[] } {
  const lines: string[] = [];
  const stream = { isTTY: false, write: (text: string) => lines.push(text.trimEnd()) > 0 } as unknown as NodeJS.WriteStream;
  return { stream, lines };
}

/** `count` requests for each key, ids `<key>-<n>`, keys interleaved. */
function requests(counts: Readonly<Record<string, number>>, also: readonly string[] = []): PlannedRequest[] {
  const list: PlannedRequest[] = [];
  const most = Math.max(...Object.values(counts));
  for (let n = 0; n < most; n++) {
    for (const [key, count] of Object.entries(counts)) if (n < count) list.push({ id: `${key}-${n}`, key, also, cost: 1 });
  }
  return list;
}

describe('cli progress: the ETA from the rules and the keys', () => {
  const fake = useFakeClock();

  function start(plan: ProgressPlan | undefined, step = 25): { progress: Progress; lines: string[] } {
    const { stream, lines } = fakeStderr();
    return { progress: new Progress({ total: plan?.requests.length ?? 20, quiet: false, stream, step, plan }), lines };
  }

  /** Results for these ids, all now, each sent once. */
  function results(progress: Progress, ids: readonly string[], ms?: number): void {
    for (const id of ids) progress.tick('ok', { id, attempts: 1, ms });
  }

  const ids = (key: string, from: number, to: number): string[] => Array.from({ length: to - from }, (_, n) => `${key}-${from + n}`);

  it('right after an opening burst of 5 of 20 requests on one key at 5/s says 3 s, where the observed rate says 0.15 s', () => {
    const { progress, lines } = start({ requests: requests({ u1: 20 }), rules: rulesOfRun(['5/s']) });
    fake.clock.tick(50);
    results(progress, ids('u1', 0, 5));
    // Three more windows for the 15 left: the run ends when the 4th burst does, 3 s from now.
    expect(progress.eta()).to.be.closeTo(3, 1e-9);
    expect(lines).to.deep.equal(['vendor-throttle: 25% (5/20), 100.0/s, ETA 3.0 s, 0 failed']);
    // What the ETA from the observed rate (5 results in 50 ms) was: 0.15 s.
    expect(15 / progress.rate()).to.be.closeTo(0.15, 1e-9);
  });

  it("adds the calls' latency: a slot frees a window after its call completes", () => {
    const { progress } = start({ requests: requests({ u1: 20 }), rules: rulesOfRun(['5/s']) });
    fake.clock.tick(100);
    results(progress, ids('u1', 0, 5), 100);
    // Rounds start at 1.1 s, 2.2 s and 3.3 s from the first start; the last call ends 100 ms after its start.
    expect(progress.eta()).to.be.closeTo(3.3, 1e-9);
  });

  it('counts the calls already made in the current window: the free slots go now', () => {
    const { progress } = start({ requests: requests({ u1: 10 }), rules: rulesOfRun(['5/s']) });
    fake.clock.tick(50);
    results(progress, ids('u1', 0, 2));
    // 3 of the 8 left go now, the other 5 when the window of the first calls has passed.
    expect(progress.eta()).to.be.closeTo(1, 1e-9);
    fake.clock.tick(400);
    results(progress, ids('u1', 2, 5));
    fake.clock.tick(600);
    results(progress, ids('u1', 5, 7));
    // The window holds the 3 calls of 450 ms and the 2 of now: the last 3 go when those of 450 ms free theirs.
    expect(progress.eta()).to.be.closeTo(0.4, 1e-9);
  });

  it('a request of cost 3 under 5/s: one request a window, not 5/3', () => {
    const plan = { requests: requests({ u1: 8 }).map((request) => ({ ...request, cost: 3 })), rules: rulesOfRun(['5/s']) };
    const { progress } = start(plan);
    fake.clock.tick(50);
    results(progress, ids('u1', 0, 1));
    // 7 requests left, one per window: the last starts 7 windows after the first.
    expect(progress.eta()).to.be.closeTo(7, 1e-9);
  });

  it("a cap on calls in flight ('1 concurrent') beside a loose rule: one call at a time at the mean latency", () => {
    const { progress } = start({ requests: requests({ u1: 20 }), rules: rulesOfRun(['1 concurrent', '1000/s']) });
    fake.clock.tick(100);
    results(progress, ids('u1', 0, 2), 100);
    // 18 left, one at a time, 100 ms each.
    expect(progress.eta()).to.be.closeTo(1.8, 1e-9);
  });

  it('two keys in parallel: the slowest key, not the sum', () => {
    const even = start({ requests: requests({ a: 20, b: 20 }), rules: rulesOfRun(['5/s']) });
    const uneven = start({ requests: requests({ a: 20, b: 10 }), rules: rulesOfRun(['5/s']) });
    fake.clock.tick(50);
    for (const { progress } of [even, uneven]) results(progress, [...ids('a', 0, 5), ...ids('b', 0, 5)]);
    // Each key of 20 needs 3 s more (6 s would be the sum); b of 10 needs 1 s, a is slower.
    expect(even.progress.eta()).to.be.closeTo(3, 1e-9);
    expect(uneven.progress.eta()).to.be.closeTo(3, 1e-9);
  });

  it('an app-wide key (a second --key, KEY=RULE) binds when it is the slowest', () => {
    const plan = { requests: requests({ u1: 5, u2: 5 }, ['app']), rules: rulesOfRun(['app=4/s', '5/s']) };
    const { progress } = start(plan);
    fake.clock.tick(50);
    results(progress, [...ids('u1', 0, 2), ...ids('u2', 0, 2)]);
    // Each user fits in its 5/s; the app key has 6 left at 4/s: 4 in 1 s, the last 2 in 2 s.
    expect(progress.eta()).to.be.closeTo(2, 1e-9);
  });

  it('a resumed run: calls of the earlier run still in the window count', () => {
    const plan = { requests: requests({ u1: 10 }), rules: rulesOfRun(['5/s']), earlier: [{ key: 'u1', slots: 5, agoMs: 200 }] };
    const { progress } = start(plan);
    // The window frees 800 ms from now; then 5, then the last 5 a window later.
    expect(progress.eta()).to.be.closeTo(1.8, 1e-9);
  });

  it('goes down burst by burst and reaches 0 s at the end', () => {
    const { progress, lines } = start({ requests: requests({ u1: 20 }), rules: rulesOfRun(['5/s']) });
    const etas: number[] = [];
    for (let burst = 0; burst < 4; burst++) {
      fake.clock.tick(burst === 0 ? 50 : 1000);
      results(progress, ids('u1', 5 * burst, 5 * burst + 5));
      etas.push(progress.eta()!);
    }
    expect(etas.map((eta) => Math.round(eta * 1000) / 1000)).to.deep.equal([3, 2, 1, 0]);
    expect(lines.map((line) => /ETA ([^,]+),/.exec(line)?.[1])).to.deep.equal(['3.0 s', '2.0 s', '1.0 s', '0 s']);
  });

  it('rules that do not hold the run back: waves of --concurrency requests at the mean latency', () => {
    const { progress } = start({ requests: requests({ u1: 40 }), rules: rulesOfRun(['1000/s']), concurrency: 4 });
    expect(progress.eta()).to.equal(undefined);
    fake.clock.tick(100);
    results(progress, ids('u1', 0, 4), 100);
    // 36 left, 4 at a time, 100 ms each.
    expect(progress.eta()).to.be.closeTo(0.9, 1e-9);
  });

  it('without rules to go by: the observed rate, as before', () => {
    const { progress, lines } = start(undefined);
    fake.clock.tick(1000);
    for (let n = 0; n < 5; n++) progress.tick('ok');
    expect(progress.eta()).to.be.closeTo(3, 1e-9);
    expect(lines).to.deep.equal(['vendor-throttle: 25% (5/20), 5.0/s, ETA 3.0 s, 0 failed']);
  });
});
