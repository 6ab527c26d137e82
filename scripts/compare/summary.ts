/**
 * The two summary tables of the side-by-side benchmark: quota used per scenario, with the
 * floor aimed at, and the cost of vendor-throttle per call beside rate-limiter-flexible's,
 * measured on the same Redis in the same run.
 */
import { contenderById } from './contenders.js';
import type { ContenderId } from './contender.js';
import { num, percent, short } from './format.js';
import type { RunOutcome } from './runner.js';
import type { Scenario } from './scenarios.js';

const VT: ContenderId = 'vendor-throttle';
const RLF: ContenderId = 'rlf';

function find(outcomes: readonly RunOutcome[], scenario: Scenario['id'], contender: ContenderId): RunOutcome | undefined {
  const outcome = outcomes.find((o) => o.scenario === scenario && o.contender === contender);
  return outcome?.failure === undefined ? outcome : undefined;
}

function quotaCell(outcome: RunOutcome | undefined): string {
  if (outcome === undefined) return '–';
  const dropped = outcome.dropped ?? 0;
  return `${percent(outcome.utilization)} (${dropped === 0 ? '0 dropped' : `${num(dropped)} dropped, ${percent(dropped / outcome.calls, 1)}`})`;
}

/** Quota used by every contender in every burst scenario, the floor aimed at beside it. */
export function quotaTable(scenarios: readonly Scenario[], outcomes: readonly RunOutcome[]): string {
  const bursts = scenarios.filter((s) => s.shape.kind === 'burst');
  const contenders = [...new Set(outcomes.map((o) => o.contender))];
  const out = [
    '### Quota used per scenario',
    '',
    'Quota used = ideal batch time ÷ actual batch time (first to last arrival at the vendor), summed over users; ' +
      "in brackets the calls the vendor silently dropped. Scenarios without HTTP count the calls' start times instead of arrivals. " +
      'Floor: the quota vendor-throttle aims at for that shape (an exact limiter loses at least one call duration per window).',
    '',
    `| scenario | ${contenders.map((c) => (c === VT ? `**${contenderById(c).label}**` : contenderById(c).label)).join(' | ')} | floor |`,
    `| --- | ${contenders.map(() => '---:').join(' | ')} | ---: |`,
  ];
  for (const scenario of bursts) {
    out.push(
      `| ${scenario.number}. ${scenario.id} | ${contenders.map((c) => quotaCell(find(outcomes, scenario.id, c))).join(' | ')} | ${scenario.floor === undefined ? '–' : percent(scenario.floor)} |`,
    );
  }
  out.push(
    '',
    '#### vendor-throttle against the exact ceiling of the same run',
    '',
    "Both on the calls' start times (first to last start, so the arrival's place inside a call does not count): " +
      "vendor-throttle's quota, and the quota an exact limiter with perfect knowledge reaches with the same calls — " +
      'each taking its measured duration, start to response, in the order they started, and starting as soon as ' +
      'every rule allows given the earlier responses, known the instant they happen. No exact limiter can beat the ' +
      'ceiling with these durations; the gap between the two is what the limiter itself costs.',
    '',
    '| scenario | vendor-throttle (starts) | exact ceiling (starts) | share of the ceiling |',
    '| --- | ---: | ---: | ---: |',
  );
  for (const scenario of bursts) {
    const o = find(outcomes, scenario.id, VT);
    if (o?.startQuota === undefined || o.exactCeiling === undefined) continue;
    out.push(`| ${scenario.number}. ${scenario.id} | ${percent(o.startQuota)} | ${percent(o.exactCeiling)} | ${percent(o.startQuota / o.exactCeiling)} |`);
  }
  out.push(
    '',
    '#### Fairness across processes',
    '',
    'Where several processes call for one user at once, with equal loads: per process, the median start of its calls; ' +
      "the spread is (latest median − earliest median) ÷ the user's first-to-last start time, mean over such users " +
      '(largest in brackets). 0: every process served all along the batch; about 0.5: one process served entirely before another.',
    '',
    `| scenario | ${contenders.map((c) => (c === VT ? `**${contenderById(c).label}**` : contenderById(c).label)).join(' | ')} |`,
    `| --- | ${contenders.map(() => '---:').join(' | ')} |`,
  );
  for (const scenario of bursts) {
    const cells = contenders.map((c) => {
      const spread = find(outcomes, scenario.id, c)?.processSpread;
      return spread === undefined ? '–' : `${short(spread.mean, 2)} (${short(spread.max, 2)})`;
    });
    if (cells.some((cell) => cell !== '–')) out.push(`| ${scenario.number}. ${scenario.id} | ${cells.join(' | ')} |`);
  }
  return out.join('\n');
}

function ratio(a: number | undefined, b: number | undefined): string {
  return a === undefined || b === undefined || !(b > 0) ? '–' : `${short(a / b, 2)}×`;
}

/** Σ value × calls / Σ calls over the burst runs both contenders finished. */
function pooled(
  outcomes: readonly RunOutcome[],
  scenarioIds: readonly Scenario['id'][],
  contender: ContenderId,
  value: (o: RunOutcome) => number,
): number | undefined {
  let sum = 0;
  let calls = 0;
  for (const id of scenarioIds) {
    const o = find(outcomes, id, contender);
    if (o === undefined) continue;
    sum += value(o) * o.calls;
    calls += o.calls;
  }
  return calls > 0 ? sum / calls : undefined;
}

/** Cost per call of vendor-throttle beside rate-limiter-flexible, from the same run. */
export function costTable(scenarios: readonly Scenario[], outcomes: readonly RunOutcome[]): string {
  const out = ['### Cost per call: vendor-throttle beside rate-limiter-flexible (same Redis, same run)', ''];
  const cost = scenarios.find((s) => s.id === 'cost');
  const bursts = scenarios.filter(
    (s) => s.shape.kind === 'burst' && !s.noHttp && find(outcomes, s.id, VT) !== undefined && find(outcomes, s.id, RLF) !== undefined,
  );
  const burstIds = bursts.map((s) => s.id);
  const vtCost = cost && find(outcomes, cost.id, VT);
  const rlfCost = cost && find(outcomes, cost.id, RLF);
  const steady = scenarios.find((s) => s.id === 'steady-http');
  const vtSteady = steady && find(outcomes, steady.id, VT);
  const rlfSteady = steady && find(outcomes, steady.id, RLF);
  const rows: string[][] = [];
  const add = (label: string, rlf: number | undefined, vt: number | undefined, digits = 1): void => {
    rows.push([label, short(rlf, digits), short(vt, digits), ratio(vt, rlf)]);
  };
  if (cost) {
    add(
      `decisions/s, no HTTP, ${num(cost.shape.users)} keys, ${cost.processes ?? 'all'} processes (scenario ${cost.number})`,
      rlfCost?.decisionsPerSec,
      vtCost?.decisionsPerSec,
      0,
    );
    add(`commands run inside Redis per call, uncontended (scenario ${cost.number})`, rlfCost?.innerCommandsPerCall, vtCost?.innerCommandsPerCall);
  }
  const waiting = bursts.map((s) => ({ s, vt: find(outcomes, s.id, VT)!, rlf: find(outcomes, s.id, RLF)! }));
  if (waiting.length > 0) {
    const worst = waiting.reduce((a, b) => (b.vt.innerCommandsPerCall > a.vt.innerCommandsPerCall ? b : a));
    add(
      `commands run inside Redis per call while calls wait: pooled over the ${waiting.length} HTTP scenarios (most: ${worst.s.number}. ${worst.s.id}, ${short(worst.vt.innerCommandsPerCall, 1)})`,
      pooled(outcomes, burstIds, RLF, (o) => o.innerCommandsPerCall),
      pooled(outcomes, burstIds, VT, (o) => o.innerCommandsPerCall),
    );
  }
  if (cost) add(`worker CPU µs per decision, no HTTP (scenario ${cost.number})`, rlfCost?.workerCpuUsPerCall, vtCost?.workerCpuUsPerCall, 0);
  if (steady) {
    const shape = `${num(steady.shape.users)} keys, ${steady.processes ?? 'all'} processes, never limited (scenario ${steady.number})`;
    add(`calls/s with HTTP, ${shape}`, rlfSteady?.decisionsPerSec, vtSteady?.decisionsPerSec, 0);
    add(`worker CPU µs per call with HTTP, ${shape}`, rlfSteady?.workerCpuUsPerCall, vtSteady?.workerCpuUsPerCall, 0);
    add(`Redis CPU µs per call with HTTP (scenario ${steady.number})`, rlfSteady?.redisCpuUsPerCall, vtSteady?.redisCpuUsPerCall);
  }
  if (cost) add(`Redis CPU µs per decision (scenario ${cost.number})`, rlfCost?.redisCpuUsPerCall, vtCost?.redisCpuUsPerCall);
  if (waiting.length > 0) {
    add(
      'Redis CPU µs per HTTP call, pooled over the HTTP scenarios',
      pooled(outcomes, burstIds, RLF, (o) => o.redisCpuUsPerCall),
      pooled(outcomes, burstIds, VT, (o) => o.redisCpuUsPerCall),
    );
    add(
      'worker CPU µs per HTTP call, pooled over the HTTP bursts (calls wait; each process runs its code cold)',
      pooled(outcomes, burstIds, RLF, (o) => o.workerCpuUsPerCall),
      pooled(outcomes, burstIds, VT, (o) => o.workerCpuUsPerCall),
      0,
    );
    const worstSent = waiting.reduce((a, b) => (b.vt.sentPerCall > a.vt.sentPerCall ? b : a));
    add(
      `client commands per call, most in any HTTP scenario (${worstSent.s.number}. ${worstSent.s.id})`,
      worstSent.rlf.sentPerCall,
      worstSent.vt.sentPerCall,
      2,
    );
  }
  if (cost) add(`client commands per call (scenario ${cost.number})`, rlfCost?.sentPerCall, vtCost?.sentPerCall, 2);
  const bytes = (c: ContenderId): number | undefined => {
    const values = outcomes.filter((o) => o.contender === c && o.failure === undefined && o.redisBytesPerUser > 0).map((o) => o.redisBytesPerUser);
    return values.length > 0 ? Math.max(...values) : undefined;
  };
  add('Redis bytes per user key (MEMORY USAGE of all its keys during the run, largest over the scenarios)', bytes(RLF), bytes(VT), 0);
  out.push('| per call | rate-limiter-flexible | vendor-throttle | vendor-throttle ÷ rlf |', '| --- | ---: | ---: | ---: |');
  for (const row of rows) out.push(`| ${row.join(' | ')} |`);
  out.push('', 'Per scenario (vendor-throttle / rate-limiter-flexible):', '');
  out.push(
    '| scenario | client cmds/call | inside Redis/call | Redis CPU µs/call | worker CPU µs/call | Redis bytes/user |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
  );
  for (const s of scenarios) {
    const vt = find(outcomes, s.id, VT);
    const rlf = find(outcomes, s.id, RLF);
    if (vt === undefined || rlf === undefined) continue;
    const pair = (f: (o: RunOutcome) => number, digits: number): string => `${short(f(vt), digits)} / ${short(f(rlf), digits)}`;
    out.push(
      `| ${s.number}. ${s.id} | ${pair((o) => o.sentPerCall, 2)} | ${pair((o) => o.innerCommandsPerCall, 1)} | ${pair((o) => o.redisCpuUsPerCall, 1)} | ${pair((o) => o.workerCpuUsPerCall, 0)} | ${pair((o) => o.redisBytesPerUser, 0)} |`,
    );
  }
  return out.join('\n');
}
